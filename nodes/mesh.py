"""RasterKit_LoadMesh and RasterKit_MeshRasterizer: meshes into normal, depth, position, mask and
face-id maps and shaded, vertex-colour or textured renders, from one view, the six texture-baking views,
a list of views or core Load3D's camera, with no compiled extension."""
from __future__ import annotations

import math
import os
import re
from struct import error as struct_error

import torch

from ..utils.mesh_rasterizer import bake as B
from ..utils.inputs import mesh_files as mesh_files_module
from ..utils.mesh_rasterizer import raster as M
from ..utils.mesh_rasterizer import shading as S
from ..utils.core.device import check_memory, run_chunked
from ..utils.inputs.text import short
from ._comfy import Progress, comfy_module, intermediate_device, render_device
from ._schema import Bool, Combo, Float, Int, Output, RasterKitNode, Socket, String

MESH_EXTENSIONS = (".obj", ".glb", ".gltf", ".ply", ".stl", ".off")
GOLDEN_RATIO_16 = 40503  # 0.6180339887 * 65536
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
# LoadMesh's peak per declared vertex, triangle and texel (trimesh's arrays, ours, the decoded image
# and its float copy: measured 160 B, 320 B and 39 B)
LOAD_BYTES_PER_VERTEX = 200
LOAD_BYTES_PER_FACE = 400
LOAD_BYTES_PER_TEXEL = 40
MAX_TEXTURE_PIXELS = 8192 * 8192
MAX_VIEWS = 4096
MAX_CAMERA_DISTANCE = 1000.0  # the distance widget's maximum
# Vertices beyond this magnitude overflow float32 in the cameras' products (clip space, screen areas)
MAX_COORDINATE = 1e18
AMBIENT = 0.2
SHADINGS = ("lambert", "none", "matcap", "vertex_color", "texture")
# Work (pixels + faces + vertices) of the views rendered between two interrupt checks: a pixel or a
# triangle of a view costs ~2-4 us on a 2-core CPU (~15 us when it is busy), so a chunk takes well under
# a second
CHUNK_WORK = 1 << 16
BUNDLED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "example_workflows", "assets")


class Mesh:
    """ComfyUI's MESH layout (comfy_extras.nodes_hunyuan3d.MESH): vertices float [B,V,3], faces int [B,F,3],
    and the newer optional fields (None when absent): uvs float [B,V,2] (OpenGL's: v up, so the texture's
    row 0 is v = 1), texture float [B,H,W,3] (the base-colour image, 0..1), colors float [B,V,3] (vertex
    colours, 0..1), normals float [B,V,3]; vertex_counts and face_counts int [B] where the items of a
    batch are padded."""

    def __init__(self, vertices, faces, uvs=None, texture=None, colors=None, normals=None, vertex_counts=None,
                 face_counts=None):
        self.vertices = vertices
        self.faces = faces
        self.uvs, self.texture, self.colors, self.normals = uvs, texture, colors, normals
        self.vertex_counts, self.face_counts = vertex_counts, face_counts


MESH_FIELDS = ("uvs", "texture", "colors", "normals", "vertex_counts", "face_counts")


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
    return mesh


def input_directory() -> str | None:
    """ComfyUI's input folder; None outside ComfyUI (tests, demo), where only the bundled meshes load."""
    folder_paths = comfy_module("folder_paths", "get_input_directory")
    return folder_paths.get_input_directory() if folder_paths is not None else None


def _roots() -> list[str]:
    """The folders meshes are read from, symlinks resolved: ComfyUI's input folder, then the bundled assets."""
    folders = [input_directory(), BUNDLED]
    return [os.path.realpath(folder) for folder in folders if folder and os.path.isdir(folder)]


def _inside(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # another drive on Windows
        return False


def mesh_files() -> list[str]:
    """Mesh files of the input folder and its subfolders ("/"-separated names relative to it), then the
    bundled ones that the input folder does not shadow; links that lead outside are left out."""
    names: dict[str, None] = {}  # an ordered set: the input folder's names first
    for root in _roots():
        found = []
        for folder, subfolders, files in os.walk(root):
            subfolders[:] = sorted(s for s in subfolders if not s.startswith("."))
            for file in files:
                path = os.path.join(folder, file)
                # regular files only: a FIFO or a device named like a mesh would block or stream forever
                if file.lower().endswith(MESH_EXTENSIONS) and _inside(os.path.realpath(path), root) \
                        and os.path.isfile(path):
                    found.append(os.path.relpath(path, root).replace(os.sep, "/"))
        names.update(dict.fromkeys(sorted(found)))
    return list(names)


def resolve_mesh_file(name: str) -> str:
    """The real path of mesh file `name` (relative to ComfyUI's input folder, else bundled with the pack).
    Absolute names, `..` and symlinks that lead outside those folders are refused with the same error as
    a missing file, which names the input only by the name given, so errors tell nothing about the disk."""
    if not isinstance(name, str):
        raise ValueError(f"mesh_file: expected a file name (text), got {short(name)}")
    name = name.strip()
    shown = name if len(name) <= 200 else name[:200] + "..."
    if not name.lower().endswith(MESH_EXTENSIONS):
        raise ValueError(f"mesh_file: {shown!r} is not one of {', '.join(MESH_EXTENSIONS)}")
    if not os.path.isabs(name) and "\0" not in name:
        for root in _roots():
            path = os.path.realpath(os.path.join(root, name))
            if _inside(path, root) and os.path.isfile(path):
                return path
    raise ValueError(f"mesh_file: no mesh file {shown!r} in ComfyUI's input folder (choose one from the list, "
                     f"or upload one with the node's button)")


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
    DESCRIPTION = ("Loads .obj, .glb, .gltf, .ply, .stl or .off (trimesh) from ComfyUI's input folder or its "
                   "subfolders as a MESH (and as a TRIMESH); rasterkit_torus.obj is bundled with the pack.")
    INPUTS = [
        Combo("mesh_file", mesh_files, default="rasterkit_torus.obj",
              tooltip="a mesh in ComfyUI's input folder or its subfolders (upload one with the button)"),
        Bool("normalize", True, tooltip="centre the mesh and scale it to fit the cube [-1, 1]"),
    ]
    OUTPUTS = [Output("MESH", "mesh", "vertices and faces (core ComfyUI's MESH: Save GLB and the 3D nodes take it), "
                                    "with the UVs and base-colour texture, vertex colours and normals the file has"),
               Output("TRIMESH", "trimesh", "the same mesh as a trimesh.Trimesh (ComfyUI-3D-Pack style TRIMESH)")]

    @classmethod
    def fingerprint(cls, mesh_file="", normalize=True):
        """The file's content hash, so that ComfyUI reruns the node when the file is edited."""
        try:
            return _file_digest(resolve_mesh_file(mesh_file))
        except (ValueError, OSError):
            return ""  # run() names the problem

    @classmethod
    def run(cls, mesh_file="", normalize=True):
        import trimesh

        path = resolve_mesh_file(mesh_file)
        _check_declared(path, mesh_file)
        try:
            # trimesh >= 5.2 (requirements.txt) resolves textures and buffers inside the mesh's folder only
            # and fetches nothing remote
            loaded = trimesh.load(path, force="mesh", process=False)
        except Exception as error:  # trimesh raises many types for broken files
            raise ValueError(f"mesh_file: could not read {short(mesh_file)}: {_reason(error)}") from None
        if len(getattr(loaded, "faces", ())) == 0:
            raise ValueError(f"mesh_file: {mesh_file!r} has no triangles")
        vertices = torch.tensor(loaded.vertices, dtype=torch.float32)
        fields = _mesh_fields(loaded)
        if normalize:  # a translation and a uniform scale: the normals stay
            low, high = vertices.amin(0), vertices.amax(0)
            vertices = (vertices - (low + high) / 2) * (2 / float((high - low).max().clamp_min(1e-12)))
            loaded = trimesh.Trimesh(vertices.numpy(), loaded.faces, visual=loaded.visual, process=False)
        return make_mesh(vertices[None], torch.tensor(loaded.faces, dtype=torch.int64)[None], **fields), loaded


def _check_declared(path: str, name: str) -> None:
    """Refuse, before decoding, a file whose header declares textures over MAX_TEXTURE_PIXELS or a mesh and
    textures that would not fit in memory (utils/mesh_files reads the counts and image headers)."""
    try:
        declared = mesh_files_module.declared(path)
    except (OSError, ValueError, struct_error):
        return  # unreadable headers: trimesh names the problem
    for width, height in declared.textures:
        if width * height > MAX_TEXTURE_PIXELS:
            raise ValueError(f"mesh_file: {short(name)} has a {width}x{height} texture; textures of up to "
                             f"{MAX_TEXTURE_PIXELS:,} texels (8192 x 8192) are read")
    estimate = (LOAD_BYTES_PER_VERTEX * declared.vertices + LOAD_BYTES_PER_FACE * declared.faces
                + LOAD_BYTES_PER_TEXEL * sum(width * height for width, height in declared.textures))
    check_memory(estimate, f"mesh_file: {short(name)} ({declared.vertices:,} vertices, {declared.faces:,} "
                           f"triangles, {len(declared.textures)} textures)", torch.device("cpu"))


def _reason(error: BaseException) -> str:
    """What went wrong reading a file, for the UI: the exception's type and message, with paths left out
    (they would tell where ComfyUI's folders are, or probe outside them)."""
    text = re.sub(r"([A-Za-z]:)?([\\/][^\s'\"\\/]+)+[\\/]?", "<path>", str(error)).strip()
    text = text if len(text) <= 200 else text[:200] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _mesh_fields(loaded) -> dict:
    """The optional MESH fields of a trimesh, as a batch of one: uvs and the base-colour texture of a
    textured mesh (trimesh splits its vertices at UV seams, so there is one UV per vertex), vertex
    colours (RGB), vertex normals (the file's where trimesh keeps them, else trimesh's)."""
    import numpy as np

    visual, fields = loaded.visual, {}
    uv = getattr(visual, "uv", None)
    if visual.kind == "texture" and uv is not None and len(uv) == len(loaded.vertices):
        fields["uvs"] = torch.tensor(np.asarray(uv), dtype=torch.float32)[None]
        # glTF's PBR material, else an OBJ's MTL image (trimesh reads none outside the mesh's folder)
        image = getattr(visual.material, "baseColorTexture", None)
        image = getattr(visual.material, "image", None) if image is None else image
        if image is not None:
            fields["texture"] = torch.from_numpy(np.asarray(image.convert("RGB"), dtype=np.float32) / 255)[None]
    elif visual.kind == "vertex":
        fields["colors"] = torch.tensor(visual.vertex_colors[:, :3], dtype=torch.float32)[None] / 255
    fields["normals"] = torch.tensor(loaded.vertex_normals, dtype=torch.float32)[None]
    return fields


def _mesh_tensors(mesh, trimesh_object):
    """vertices float [V,3], faces int64 [F,3] and the optional fields that are there (MESH_FIELDS but the
    counts: uvs [V,2], texture [H,W,3], colors [V,3], normals [V,3]) from a MESH (core or
    ComfyUI-3D-Pack's; the first item of a batch, cut to its counts) or a trimesh."""
    if (mesh is None) == (trimesh_object is None):
        raise ValueError("mesh: connect a MESH or a TRIMESH (one of them)")
    if mesh is not None:
        try:  # core ComfyUI's MESH (.vertices, .faces), else ComfyUI-3D-Pack's (.v, .f)
            if hasattr(mesh, "vertices"):
                vertices, faces = torch.as_tensor(mesh.vertices), torch.as_tensor(mesh.faces)
            else:
                vertices, faces = torch.as_tensor(mesh.v), torch.as_tensor(mesh.f)
        except (AttributeError, TypeError, ValueError, RuntimeError):
            raise ValueError(f"mesh: expected a MESH with .vertices and .faces (or .v and .f), "
                             f"got {type(mesh).__name__}") from None
        batched = vertices.ndim == 3
        vertices, faces = (vertices[0], faces[0]) if batched else (vertices, faces)
        fields = {name: getattr(mesh, name, None) for name in ("uvs", "texture", "colors", "normals")}
        if fields["colors"] is None:  # an older spelling
            fields["colors"] = getattr(mesh, "vertex_colors", None)
        fields = {name: torch.as_tensor(value)[0] if batched else torch.as_tensor(value)
                  for name, value in fields.items() if value is not None}
        if batched and getattr(mesh, "vertex_counts", None) is not None:
            vertices = vertices[:int(mesh.vertex_counts[0])]
            fields = {name: value if name == "texture" else value[:len(vertices)] for name, value in fields.items()}
        if batched and getattr(mesh, "face_counts", None) is not None:
            faces = faces[:int(mesh.face_counts[0])]
    else:
        try:
            vertices, faces = torch.as_tensor(trimesh_object.vertices), torch.as_tensor(trimesh_object.faces)
            fields = {name: value[0] for name, value in _mesh_fields(trimesh_object).items()}
        except AttributeError:
            raise ValueError(f"trimesh: expected a trimesh.Trimesh, got {type(trimesh_object).__name__}") from None
    if vertices.ndim != 2 or vertices.shape[-1] != 3 or vertices.shape[0] == 0:
        raise ValueError(f"mesh: vertices should be [V,3] with V > 0, got shape {tuple(vertices.shape)}")
    if faces.ndim != 2 or faces.shape[-1] != 3 or faces.shape[0] == 0:
        raise ValueError(f"mesh: faces should be triangles [F,3] with F > 0, got shape {tuple(faces.shape)}")
    if not (vertices.is_floating_point() or B.integral(vertices)):
        raise ValueError(f"mesh: vertices should be numbers, got dtype {vertices.dtype}")
    largest = float(vertices.abs().max())  # in the given dtype (float64 may pass float32's range); NaN if any is
    vertices = vertices.float()
    if not math.isfinite(largest):
        raise ValueError("mesh: vertices contain NaN or infinite values; finite coordinates are accepted")
    if largest > MAX_COORDINATE:
        raise ValueError(f"mesh: vertices are finite but reach {largest:.3g}, beyond what float32 rendering can "
                         f"take; coordinates up to {MAX_COORDINATE:g} are accepted (scale the mesh down, e.g. "
                         f"LoadMesh's normalize)")
    faces = _face_indices(faces)
    if int(faces.min()) < 0 or int(faces.max()) >= vertices.shape[0]:
        raise ValueError(f"mesh: face indices must lie in 0..{vertices.shape[0] - 1}, "
                         f"got {int(faces.min())}..{int(faces.max())}")
    for name, channels in (("uvs", (2,)), ("colors", (3, 4)), ("normals", (3,))):
        value = fields.get(name)
        if value is not None and (value.shape[:1] != vertices.shape[:1] or value.ndim != 2
                                  or value.shape[1] not in channels):
            raise ValueError(f"mesh: {name} should be [{len(vertices)},{'|'.join(map(str, channels))}] "
                             f"(one per vertex), got shape {tuple(value.shape)}")
    texture = fields.get("texture")
    if texture is not None and (texture.ndim != 3 or texture.shape[-1] not in (3, 4) or 0 in texture.shape):
        raise ValueError(f"mesh: texture should be an image [H,W,3], got shape {tuple(texture.shape)}")
    fields = {name: S.unit_float(value, f"mesh: {name}")[..., :3] if name in ("colors", "texture")
              else value.float() for name, value in fields.items()}
    return vertices, faces, fields


def _face_indices(faces: torch.Tensor) -> torch.Tensor:
    """int64 faces from a MESH's faces: integer dtypes as they are, floats only where whole numbers (a
    float index would be truncated to another vertex)."""
    if B.integral(faces):
        return faces.long()
    if not faces.is_floating_point():
        raise ValueError(f"mesh: faces should be whole vertex indices, got dtype {faces.dtype}")
    fractional = faces != faces.round()  # NaN too
    if bool(fractional.any()):
        raise ValueError(f"mesh: faces should be whole vertex indices, got {float(faces[fractional][0])} "
                         f"({faces.dtype}); integer indices (or floats without a fraction) are accepted")
    return faces.long()


def _vertex_normals(vertices: torch.Tensor, faces: torch.Tensor) -> torch.Tensor:
    """Area-weighted vertex normals [V,3]."""
    corners = vertices[faces]
    face_normals = torch.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0], dim=-1)
    normals = torch.zeros_like(vertices).index_add_(0, faces.reshape(-1), face_normals.repeat_interleave(3, 0))
    return torch.nn.functional.normalize(normals, dim=-1)


def _face_colours(findices: torch.Tensor) -> torch.Tensor:
    """A distinct colour per face id (golden-ratio hues, in 16-bit fixed point: no float64, and exact
    for any face count), black background: [..,H,W,3]."""
    hue = (findices.long() * GOLDEN_RATIO_16 % 65536).float() / 65536
    rgb = (torch.stack([hue, hue + 2 / 3, hue + 1 / 3], -1) % 1.0 * 6 - 3).abs().sub(1).clamp(0, 1)
    return rgb * 0.8 * (findices > 0)[..., None] + 0.2 * (findices > 0)[..., None]


class MeshRasterizer(RasterKitNode):
    NODE_ID = "RasterKit_MeshRasterizer"
    DISPLAY_NAME = "Mesh Rasterizer (RasterKit)"
    CATEGORY = "RasterKit/mesh"
    DESCRIPTION = ("Rasterizes a mesh into normal, depth, position, mask and face-id maps and a render (Lambert, "
                   "matcap, vertex colours or texture, anti-aliased), from one orbit camera, the six texture-baking "
                   "views, a list of views or core Load3D's camera. Plain torch: no CUDA extension to build.")
    INPUTS = [
        Int("width", 512, 16, 8192, 16, tooltip="width of every map in pixels"),
        Int("height", 512, 16, 8192, 16, tooltip="height of every map in pixels"),
        Combo("views", ("single", "six", "list"),
              tooltip="single: one camera at azimuth and elevation; six: front, right, back, left, top and bottom "
                      "(the texture-baking views; turned by azimuth and elevation when turn_six_views is on); "
                      "list: the views of view_list"),
        Float("azimuth", 30.0, -360.0, 360.0, 1.0,
              tooltip="camera angle around the vertical axis in degrees: 0 looks from the front (+z), 90 from the "
                      "right (+x). With views=six it turns the whole rig if turn_six_views is on"),
        Float("elevation", 20.0, -90.0, 90.0, 1.0,
              tooltip="camera angle above the horizon in degrees: 90 looks from above. With views=six it tilts the "
                      "whole rig if turn_six_views is on (e.g. -90 stands a z-up mesh upright)"),
        Float("distance", 3.0, 0.1, 1000.0, 0.1,
              tooltip="camera distance from the origin (a normalized mesh fits the cube [-1, 1])"),
        Combo("projection", ("perspective", "orthographic"),
              tooltip="orthographic: parallel rays, sizes do not shrink with depth (the usual texture-baking choice)"),
        Float("fov", 40.0, 1.0, 170.0, 1.0, tooltip="vertical field of view (perspective); orthographic views "
                                                    "show the same height at the mesh centre"),
        Bool("cull_back_faces", True, tooltip="skip triangles facing away from the camera (off: open meshes show "
                                              "their inside)"),
        # after the older widgets, so that saved workflows keep their values (and their standard six views)
        Bool("turn_six_views", False, tooltip="views=six: turn the whole rig by azimuth and elevation (its front "
                                              "view is then the single view at those angles); off: the standard "
                                              "axis views, azimuth and elevation unused"),
        Socket("mesh", "MESH", optional=True,
               tooltip="core ComfyUI's MESH or ComfyUI-3D-Pack's (.v, .f); the first mesh of a batch"),
        Socket("trimesh", "TRIMESH", optional=True, tooltip="a trimesh.Trimesh, instead of mesh"),
        # after the older widgets, at defaults that keep the older outputs as they were
        Combo("normal_space", ("view", "world"),
              tooltip="normal map in view space (x right, y up, z towards the camera) or world space (x, y, z of "
                      "the mesh's coordinates)"),
        Combo("depth_mode", ("normalized", "distance"),
              tooltip="normalized: white nearest, dark farthest, each view scaled on its own; distance: the "
                      "distance along the view axis in scene units as the pixel's value (0 on background)"),
        Combo("shading", SHADINGS,
              tooltip="the render output: lambert (white, lit from light_azimuth and light_elevation), none "
                      "(flat white), matcap (the matcap image looked up by view-space normal), vertex_color or "
                      "texture (the mesh's vertex colours or base-colour texture through its UVs, mipmapped; unlit)"),
        Float("light_azimuth", 30.0, -360.0, 360.0, 1.0,
              tooltip="lambert: light direction around the camera's vertical axis in degrees (view space: the "
                      "light turns with the camera; 0 is a headlight, 90 from the right)"),
        Float("light_elevation", 30.0, -90.0, 90.0, 1.0,
              tooltip="lambert: light direction above the camera's horizon in degrees (view space)"),
        Bool("antialias", False, tooltip="render and render_alpha: blend pixels across silhouette edges by the "
                                        "part of each the mesh covers (the other maps stay aliased)"),
        String("view_list", "0,0; 90,0; 180,0; 270,0; 0,90; 180,-90",
               tooltip="views=list: 'azimuth,elevation[,weight]; ...' in degrees, one view each (Hy3DCameraConfig "
                       "style); weights (default 1) come out in raster's view_weights"),
        Float("ortho_scale", 0.0, 0.0, 1000.0, 0.01,
              tooltip="orthographic: the height the view shows in scene units; 0 keeps the height a perspective "
                      "view with this fov shows at the mesh centre"),
        Socket("matcap", "IMAGE", optional=True, tooltip="shading=matcap: a matcap image (a lit sphere seen from "
                                                         "the front; its first image is used)"),
        Socket("camera_info", "LOAD3D_CAMERA", optional=True,
               tooltip="core Load3D's camera_info: when connected, one view from its position towards its target, "
                       "its zoom and camera type (views, azimuth, elevation and distance unused)"),
    ]
    OUTPUTS = [Output("IMAGE", "normal", "view-space normals as colours (x right, y up, z towards the camera); "
                                         "background #8080FF"),
               Output("IMAGE", "depth", "white nearest, dark farthest, each view scaled on its own; background black"),
               Output("IMAGE", "position", "world position scaled into the mesh's bounding box (0..1 per axis)"),
               Output("MASK", "mask", "1 where the mesh covers the pixel"),
               Output("IMAGE", "face_id", "a distinct colour per triangle"),
               Output("RASTER", "raster", "findices (0 = background, else face + 1), barycentric, the cameras' "
                                          "view and projection matrices and view_weights"),
               Output("IMAGE", "render", "the mesh shaded as shading says, on black (premultiplied: composite it "
                                         "over a background with render_alpha)"),
               Output("MASK", "render_alpha", "the render's coverage: anti-aliased at silhouettes when antialias "
                                              "is on")]

    @classmethod
    def run(cls, width=512, height=512, views="single", azimuth=30.0, elevation=20.0, distance=3.0,
            projection="perspective", fov=40.0, cull_back_faces=True, turn_six_views=False, mesh=None, trimesh=None,
            normal_space="view", depth_mode="normalized", shading="lambert", light_azimuth=30.0, light_elevation=30.0,
            antialias=False, view_list="0,0; 90,0; 180,0; 270,0; 0,90; 180,-90", ortho_scale=0.0, matcap=None,
            camera_info=None):
        vertices, faces, fields = _mesh_tensors(mesh, trimesh)
        shade = _shading_inputs(shading, fields, matcap)
        device = render_device()
        weights = None
        if camera_info is not None:
            view, distance, zoom, camera_type = _load3d_camera(camera_info)
            projection = camera_type or projection
        else:
            zoom = 1.0
            view = M.orbit_cameras([azimuth], [elevation], distance)
            if views == "six":
                view = _turned_rig(view[0] if turn_six_views else torch.eye(4), distance)
            elif views == "list":
                azimuths, elevations, weights = parse_view_list(view_list)
                view = M.orbit_cameras(azimuths, elevations, distance)
        aspect = width / height
        near, far = max(distance * 0.01, distance - 10.0), distance + 10.0
        if projection == "perspective":
            shown = fov if zoom == 1 else 2 * math.degrees(math.atan(math.tan(math.radians(fov) / 2) / zoom))
            proj = M.perspective(shown, aspect, near, far)
        else:
            half_height = ortho_scale / 2 if ortho_scale > 0 else \
                distance * torch.tan(torch.tensor(fov).deg2rad() / 2).item()
            proj = M.orthographic(half_height / zoom, aspect, near, far)
        homogeneous = torch.cat([vertices, torch.ones(len(vertices), 1)], 1)
        camera = proj @ view
        count, pixels = len(view), width * height
        # views in chunks of about CHUNK_WORK pixels, faces and vertices, so that an interrupt is seen
        # between them within a second
        views_per_chunk = max(1, CHUNK_WORK // (pixels + len(faces) + len(vertices)))
        outputs, per_view, mesh_bytes = render_bytes(width, height, count, len(vertices), len(faces), antialias)
        work = per_view * min(count, views_per_chunk)
        what = (f"width x height x views ({width} x {height} x {count}) with a mesh of {len(vertices):,} vertices "
                f"and {len(faces):,} triangles")
        if device == intermediate_device():
            check_memory(outputs + work + mesh_bytes, what, device)
        else:
            check_memory(outputs + mesh_bytes, what, intermediate_device())
            check_memory(work + mesh_bytes, what, device)
        normals = _vertex_normals(vertices, faces)
        partners = S.edge_partners(faces, vertices) if antialias else None
        light = S.light_direction(light_azimuth, light_elevation)
        progress = Progress(count)

        def render(start, stop, on):
            clip = torch.einsum("bij,nj->bni", camera[start:stop], homogeneous)
            return _maps(clip.to(on), view[start:stop].to(on), vertices.to(on), faces.to(on),
                         normals.to(on), width, height, cull_back_faces, normal_space, depth_mode,
                         {name: value.to(on) for name, value in shade.items()},
                         light.to(on) if shading == "lambert" else None,
                         None if partners is None else partners.to(on))

        chunks = run_chunked(render, count, per_view, device, on_chunk=progress, limit=views_per_chunk)
        # one chunk (the usual case) is returned as it is: a concatenation would copy every map
        normal, depth, position, mask, face_id, findices, barycentric, shaded, alpha = (
            torch.cat(maps) if len(maps) > 1 else maps[0] for maps in zip(*chunks))
        raster = {"findices": findices, "barycentric": barycentric, "view": view, "projection": proj,
                  "faces": faces, "vertices": vertices,
                  "view_weights": torch.ones(count) if weights is None else torch.tensor(weights)}
        return normal, depth, position, mask, face_id, raster, shaded, alpha


def render_bytes(width: int, height: int, views: int, vertices: int, faces: int, antialias: bool
                 ) -> tuple[int, int, int]:
    """MeshRasterizer's estimated peak in bytes, in three parts: its outputs (every view), the work of one
    view (its pixels, triangles and vertices; a chunk of views takes that many times it) and the mesh's
    own arrays."""
    pixels = width * height
    per_view = (pixels * (WORK_BYTES_PER_PIXEL + SHADING_BYTES_PER_PIXEL + ANTIALIAS_BYTES_PER_PIXEL * antialias)
                + faces * WORK_BYTES_PER_FACE_VIEW + vertices * WORK_BYTES_PER_VERTEX_VIEW)
    return (OUTPUT_BYTES_PER_PIXEL * pixels * views, per_view, MESH_BYTES_PER_FACE * faces + MESH_BYTES_PER_VERTEX * vertices)


def parse_view_list(text: str) -> tuple[list[float], list[float], list[float]]:
    """'azimuth,elevation[,weight]; ...' (degrees; weight 1 where left out) -> azimuths, elevations, weights."""
    azimuths, elevations, weights = [], [], []
    if not isinstance(text, str):
        raise ValueError(f"view_list: expected text 'azimuth,elevation[,weight]; ...', got {short(text)}")
    for item in (part.strip() for part in text.replace("\n", ";").split(";")):
        if not item:
            continue
        if len(azimuths) == MAX_VIEWS:
            raise ValueError(f"view_list: more than {MAX_VIEWS:,} views; at most {MAX_VIEWS:,} are rendered at once "
                             f"(split the list over several nodes)")
        try:
            numbers = [float(number) for number in item.split(",")]
        except ValueError:
            numbers = []
        if len(numbers) not in (2, 3) or not all(math.isfinite(n) for n in numbers):
            raise ValueError(f"view_list: expected 'azimuth,elevation[,weight]; ...' in degrees, got {short(item)}")
        if not -90 <= numbers[1] <= 90 or (len(numbers) == 3 and numbers[2] < 0):
            raise ValueError(f"view_list: elevations lie in -90..90 and weights are >= 0, got {short(item)}")
        azimuths.append(numbers[0])
        elevations.append(numbers[1])
        weights.append(numbers[2] if len(numbers) == 3 else 1.0)
    if not azimuths:
        raise ValueError("view_list: no views (views=list needs 'azimuth,elevation[,weight]; ...')")
    return azimuths, elevations, weights


def _load3d_camera(info) -> tuple[torch.Tensor, float, float, str | None]:
    """view [1,4,4], distance, zoom and camera type ("perspective", "orthographic" or None) of core Load3D's
    camera_info ({"position": {x, y, z}, "target": {x, y, z}, "zoom": z, "cameraType": t}): a camera at
    position looking at target, y up (three.js's)."""
    try:
        position = torch.tensor([float(info["position"][axis]) for axis in "xyz"])
        target = torch.tensor([float(info["target"][axis]) for axis in "xyz"])
        zoom = float(info.get("zoom", 1) or 1)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ValueError(f"camera_info: expected Load3D's camera_info (position, target: x, y, z; zoom), "
                         f"got {short(info)}") from None
    far = float(torch.cat([position, target]).abs().max())  # NaN where any is NaN
    if far > MAX_CAMERA_DISTANCE:
        raise ValueError(f"camera_info: the camera's position or target lies {far:.3g} from the origin; up to "
                         f"{MAX_CAMERA_DISTANCE:g} (the distance input's range) is accepted, got {short(info)}")
    distance = float((position - target).norm())
    if not (math.isfinite(distance) and distance > 0 and math.isfinite(zoom) and zoom > 0):
        raise ValueError(f"camera_info: the camera needs a finite position away from its target and zoom > 0, "
                         f"got {short(info)}")
    forward = (target - position) / distance
    # looking straight up or down, "up" is the -z/+z axis instead of +y (as orbit_cameras)
    up = torch.tensor([0.0, 0.0, float(forward[1] > 0) * 2 - 1]) if abs(float(forward[1])) > 0.9999 else \
        torch.tensor([0.0, 1.0, 0.0])
    camera_type = {"perspective": "perspective", "orthographic": "orthographic"}.get(info.get("cameraType"))
    return M.look_at(position[None], target[None], up[None]), distance, zoom, camera_type


def _shading_inputs(shading: str, fields: dict, matcap) -> dict:
    """The tensors the render's shading needs, checked: texture and uvs, colors, or the matcap image."""
    if shading not in SHADINGS:
        raise ValueError(f"shading: expected one of {', '.join(SHADINGS)}, got {short(shading)}")
    if shading == "texture":
        if "uvs" not in fields or "texture" not in fields:
            raise ValueError("shading: texture needs a mesh with UVs and a base-colour texture (a textured "
                             ".glb or .obj with its .mtl and image beside it)")
        return {"uvs": fields["uvs"], "texture": fields["texture"]}
    if shading == "vertex_color":
        if "colors" not in fields:
            raise ValueError("shading: vertex_color needs a mesh with vertex colours (e.g. a .ply that has them)")
        return {"colors": fields["colors"]}
    if shading == "matcap":
        if matcap is None:
            raise ValueError("matcap: connect a matcap image (shading=matcap)")
        if not isinstance(matcap, torch.Tensor):
            raise ValueError(f"matcap: expected an IMAGE [B,H,W,3], got {short(matcap)}")
        if matcap.ndim not in (3, 4) or matcap.shape[-1] not in (3, 4) or 0 in matcap.shape:
            raise ValueError(f"matcap: expected an IMAGE [B,H,W,3] (its first image is used), got shape "
                             f"{tuple(matcap.shape)}")
        image = matcap[0] if matcap.ndim == 4 else matcap
        return {"matcap": S.unit_float(image, "matcap")[..., :3]}
    return {}


def _turned_rig(front: torch.Tensor, distance: float) -> torch.Tensor:
    """The six texture-baking views [6,4,4] of a model turned so that their front view is `front` [4,4]
    (an orbit camera at `distance`): each standard view after the front camera's rotation. The standard
    front camera's rotation is the identity, so azimuth 0 and elevation 0 give the standard views."""
    standard = M.orbit_cameras([a for a, _ in M.STANDARD_VIEWS], [e for _, e in M.STANDARD_VIEWS], distance)
    turn = torch.eye(4)
    turn[:3, :3] = front[:3, :3]
    return standard @ turn


def _maps(clip, view, vertices, faces, vertex_normals, width, height, cull_back_faces, normal_space, depth_mode,
          shade, light, partners):
    """The maps of B views on clip's device, returned on ComfyUI's intermediate device: normal, depth,
    position [B,H,W,3], mask [B,H,W], face colours [B,H,W,3], findices int32 [B,H,W], barycentric [B,H,W,3],
    render [B,H,W,3], render alpha [B,H,W]. clip float [B,V,4] (clip-space vertices per view), view float
    [B,4,4], vertex_normals float [V,3], shade: the tensors of _shading_inputs (empty: lambert or none, by
    whether light is used), light float [3] (view space), partners int64 [M,3] (edge_partners) or None
    for no antialiasing."""
    findices, barycentric = M.rasterize_views(clip, faces, width, height, cull_back_faces=cull_back_faces)
    # the rasterizer's rows follow NDC y upwards (its API's convention): flip so that up is up
    findices, barycentric = findices.flip(1), barycentric.flip(1)
    covered = (findices > 0)[..., None]
    world_normals = M.interpolate(vertex_normals, findices, barycentric, faces)
    view_normals = torch.nn.functional.normalize(torch.einsum("bij,bhwj->bhwi", view[:, :3, :3], world_normals), dim=-1)
    normals = view_normals if normal_space == "view" else torch.nn.functional.normalize(world_normals, dim=-1)
    normal_map = torch.where(covered, normals * 0.5 + 0.5, torch.tensor([0.5, 0.5, 1.0], device=clip.device))
    position = M.interpolate(vertices, findices, barycentric, faces)
    low, high = vertices.amin(0), vertices.amax(0)
    position_map = torch.where(covered, (position - low) / (high - low).clamp_min(1e-12), 0.0)
    view_depth = -torch.einsum("bj,bhwj->bhw", view[:, 2, :3], position) - view[:, 2, 3][:, None, None]
    mask = covered[..., 0]
    if depth_mode == "distance":
        depth = torch.where(mask, view_depth, 0.0)
    else:
        near_depth = torch.where(mask, view_depth, torch.inf).flatten(1).amin(1)[:, None, None]
        far_depth = torch.where(mask, view_depth, -torch.inf).flatten(1).amax(1)[:, None, None]
        depth = torch.where(mask, 1 - (view_depth - near_depth) / (far_depth - near_depth).clamp_min(1e-12), 0.0)
    colour = _shade(shade, light, view_normals, covered, findices, barycentric, faces)
    rgba = torch.cat([colour, covered.float()], -1)
    if partners is not None:
        rgba = S.antialias(rgba, findices, S.screen_corners(clip, faces, width, height), partners)
    out = intermediate_device()
    return (normal_map.to(out), depth[..., None].expand(-1, -1, -1, 3).contiguous().to(out), position_map.to(out),
            mask.float().to(out), _face_colours(findices).to(out), findices.to(out), barycentric.to(out),
            rgba[..., :3].contiguous().to(out), rgba[..., 3].contiguous().to(out))


def _shade(shade, light, view_normals, covered, findices, barycentric, faces):
    """The render's colours [B,H,W,3] (0 on background): texture, vertex colours or matcap where shade
    holds them, else Lambert (light float [3], view space) or flat white (light None)."""
    if "texture" in shade:
        return S.textured(shade["texture"], shade["uvs"], findices, barycentric, faces)
    if "colors" in shade:
        return M.interpolate(shade["colors"], findices, barycentric, faces)
    if "matcap" in shade:
        return S.matcap(view_normals, shade["matcap"], covered[..., 0])
    if light is None:
        return covered.float().expand(-1, -1, -1, 3)
    intensity = S.lambert(view_normals, light.expand(len(view_normals), 3), AMBIENT)
    return (intensity * covered).expand(-1, -1, -1, 3)


NODES = [LoadMesh, MeshRasterizer]
