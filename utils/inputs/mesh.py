"""Mesh values as the mesh nodes receive them, checked: ComfyUI's MESH (core or ComfyUI-3D-Pack's) or a
trimesh into tensors, the optional fields of a trimesh (UVs, base-colour texture, vertex colours,
normals), the render's shading inputs, Mesh Rasterizer's view list and core Load3D's camera_info. Errors
name the input, the value and what is accepted."""

from __future__ import annotations

import logging
import math
from typing import NamedTuple

import torch

from .text import short

MESH_FIELDS = ("uvs", "texture", "colors", "normals", "vertex_counts", "face_counts")
# Vertices beyond this magnitude overflow float32 in the cameras' products (clip space, screen areas)
MAX_COORDINATE = 1e18
MAX_VIEWS = 4096
MAX_CAMERA_DISTANCE = 1000.0  # the distance widget's maximum
SHADINGS = ("lambert", "none", "matcap", "vertex_color", "texture")
# core's MESH holds linear vertex colours (glTF's COLOR_0: PaintMesh stores srgb ** 2.2, Render Mesh
# shows colours ** (1 / 2.2)); the same power here, so that core's colours round-trip exactly
CORE_COLOUR_GAMMA = 2.2
# the fields of a core MESH that the Mesh Rasterizer reads (color_counts: older cores' colour lengths)
READ_FIELDS = frozenset(
    ("vertices", "faces", "uvs", "texture", "colors", "vertex_colors", "normals")
    + ("vertex_counts", "face_counts", "color_counts")
)
# how the maps' normals are made: mesh_rasterizer.normals.corner_normals
NORMAL_SMOOTHINGS = ("auto", "by_position", "by_vertex", "flat", "from_file")


class Mesh:
    """ComfyUI's MESH layout (comfy_extras.nodes_hunyuan3d.MESH): vertices float [B,V,3], faces int [B,F,3],
    and the newer optional fields (None when absent): uvs float [B,V,2] (OpenGL's: v up, so the texture's
    row 0 is v = 1), texture float [B,H,W,3] (the base-colour image, 0..1), colors float [B,V,3] (vertex
    colours, 0..1, linear as core stores them: core_colours), normals float [B,V,3]; vertex_counts and
    face_counts int [B] where the items of a batch are padded."""

    def __init__(
        self, vertices, faces, uvs=None, texture=None, colors=None, normals=None, vertex_counts=None, face_counts=None
    ):
        self.vertices = vertices
        self.faces = faces
        self.uvs, self.texture, self.colors, self.normals = uvs, texture, colors, normals
        self.vertex_counts, self.face_counts = vertex_counts, face_counts


def integral(value: torch.Tensor) -> bool:
    """Whether a tensor holds integers (any integer dtype; not bool)."""
    return not value.is_floating_point() and not value.is_complex() and value.dtype != torch.bool


def unit_float(image, name: str) -> torch.Tensor:
    """An image or colours of any dtype as float32 0..1, converted once: integers span their type's range
    (uint8 0..255, uint16 0..65535, ...), bools 0 or 1, floats as they are; a ValueError naming `name`
    for anything else."""
    if not isinstance(image, torch.Tensor):
        raise ValueError(f"{name}: expected a tensor of colours, got {type(image).__name__}")
    if image.dtype == torch.bool or image.is_floating_point():
        return image.float()
    if image.is_complex():
        raise ValueError(f"{name}: expected real colour values, got dtype {image.dtype}")
    return image.float() / float(torch.iinfo(image.dtype).max)


def mesh_fields(loaded) -> dict:
    """The optional MESH fields of a trimesh, as a batch of one: uvs and the base-colour texture of a
    textured mesh (trimesh splits its vertices at UV seams, so there is one UV per vertex), vertex
    colours (RGB), vertex normals where the mesh has its own (a file's, kept by trimesh in its cache; none
    are made up here: the renderers make them, smooth across UV seams)."""
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
    if "vertex_normals" in loaded._cache:  # trimesh's own test for normals it was given
        fields["normals"] = torch.tensor(loaded.vertex_normals, dtype=torch.float32)[None]
    return fields


def mesh_tensors(mesh, trimesh_object):
    """vertices float [V,3], faces int64 [F,3] and the optional fields that are there (MESH_FIELDS but the
    counts: uvs [V,2], texture [H,W,3], colors [V,3] in sRGB, normals [V,3]) from a MESH (core or
    ComfyUI-3D-Pack's; the first item of a batch, cut to its counts; its linear colours made sRGB) or a
    trimesh."""
    if (mesh is None) == (trimesh_object is None):
        raise ValueError("mesh: connect a MESH or a TRIMESH (one of them)")
    if mesh is not None:
        vertices, faces, fields = _from_mesh(mesh)
    else:
        try:
            vertices, faces = torch.as_tensor(trimesh_object.vertices), torch.as_tensor(trimesh_object.faces)
            fields = {name: value[0] for name, value in mesh_fields(trimesh_object).items()}
        except AttributeError:
            raise ValueError(f"trimesh: expected a trimesh.Trimesh, got {type(trimesh_object).__name__}") from None
    vertices, faces = _checked_geometry(vertices, faces)
    fields = _checked_fields(fields, vertices)
    if mesh is not None and "colors" in fields:  # a trimesh's colours are sRGB already
        fields["colors"] = fields["colors"].clamp(0, 1) ** (1 / CORE_COLOUR_GAMMA)
    return vertices, faces, fields


def core_colours(fields: dict) -> dict:
    """The optional fields (mesh_fields') with the vertex colours made linear, as a core MESH holds them."""
    if fields.get("colors") is None:
        return fields
    return {**fields, "colors": fields["colors"].clamp(0, 1) ** CORE_COLOUR_GAMMA}


def log_unread_fields(mesh, node: str) -> None:
    """Name, in one line of the log, the fields of a core MESH that carry something (not None, False or
    empty) and that `node` does not read (PBR maps, tangents, material, ...): they are not drawn."""
    unread = [
        name
        for name, value in sorted(getattr(mesh, "__dict__", {}).items())
        if name not in READ_FIELDS and value is not None and value is not False and not _empty(value)
    ]
    if hasattr(mesh, "vertices") and unread:
        logging.getLogger("rasterkit").info(f"{node}: the MESH's {', '.join(unread)} are not used (not drawn)")


def _empty(value) -> bool:
    try:
        return len(value) == 0
    except TypeError:
        return False


def _from_mesh(mesh):
    """vertices, faces and the optional fields of a MESH (core or ComfyUI-3D-Pack's) as tensors, unchecked:
    the first item of a batch, cut to its counts."""
    try:  # core ComfyUI's MESH (.vertices, .faces), else ComfyUI-3D-Pack's (.v, .f)
        if hasattr(mesh, "vertices"):
            vertices, faces = torch.as_tensor(mesh.vertices), torch.as_tensor(mesh.faces)
        else:
            vertices, faces = torch.as_tensor(mesh.v), torch.as_tensor(mesh.f)
    except (AttributeError, TypeError, ValueError, RuntimeError):
        raise ValueError(
            f"mesh: expected a MESH with .vertices and .faces (or .v and .f), got {type(mesh).__name__}"
        ) from None
    batched = vertices.ndim == 3
    vertices, faces = (vertices[0], faces[0]) if batched else (vertices, faces)
    fields = {name: getattr(mesh, name, None) for name in ("uvs", "texture", "colors", "normals")}
    if fields["colors"] is None:  # an older spelling
        fields["colors"] = getattr(mesh, "vertex_colors", None)
    fields = {
        name: torch.as_tensor(value)[0] if batched else torch.as_tensor(value)
        for name, value in fields.items()
        if value is not None
    }
    if batched and getattr(mesh, "vertex_counts", None) is not None:
        vertices = vertices[: int(mesh.vertex_counts[0])]
        fields = {name: value if name == "texture" else value[: len(vertices)] for name, value in fields.items()}
    if batched and getattr(mesh, "face_counts", None) is not None:
        faces = faces[: int(mesh.face_counts[0])]
    return vertices, faces, fields


def _checked_geometry(vertices: torch.Tensor, faces: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vertices float32 [V,3] (finite, within MAX_COORDINATE) and faces int64 [F,3] indexing them, else a
    ValueError naming mesh."""
    if vertices.ndim != 2 or vertices.shape[-1] != 3 or vertices.shape[0] == 0:
        raise ValueError(f"mesh: vertices should be [V,3] with V > 0, got shape {tuple(vertices.shape)}")
    if faces.ndim != 2 or faces.shape[-1] != 3 or faces.shape[0] == 0:
        raise ValueError(f"mesh: faces should be triangles [F,3] with F > 0, got shape {tuple(faces.shape)}")
    if not (vertices.is_floating_point() or integral(vertices)):
        raise ValueError(f"mesh: vertices should be numbers, got dtype {vertices.dtype}")
    largest = float(vertices.abs().max())  # in the given dtype (float64 may pass float32's range); NaN if any is
    vertices = vertices.float()
    if not math.isfinite(largest):
        raise ValueError("mesh: vertices contain NaN or infinite values; finite coordinates are accepted")
    if largest > MAX_COORDINATE:
        raise ValueError(
            f"mesh: vertices are finite but reach {largest:.3g}, beyond what float32 rendering can "
            f"take; coordinates up to {MAX_COORDINATE:g} are accepted (scale the mesh down, e.g. "
            f"LoadMesh's normalize)"
        )
    faces = _face_indices(faces)
    if int(faces.min()) < 0 or int(faces.max()) >= vertices.shape[0]:
        raise ValueError(
            f"mesh: face indices must lie in 0..{vertices.shape[0] - 1}, got {int(faces.min())}..{int(faces.max())}"
        )
    return vertices, faces


def _checked_fields(fields: dict, vertices: torch.Tensor) -> dict:
    """The optional fields, checked against vertices [V,3] and converted: float32, colours and texture
    0..1 RGB; else a ValueError naming mesh and the field."""
    for name, channels in (("uvs", (2,)), ("colors", (3, 4)), ("normals", (3,))):
        value = fields.get(name)
        if value is not None and (
            value.shape[:1] != vertices.shape[:1] or value.ndim != 2 or value.shape[1] not in channels
        ):
            raise ValueError(
                f"mesh: {name} should be [{len(vertices)},{'|'.join(map(str, channels))}] "
                f"(one per vertex), got shape {tuple(value.shape)}"
            )
    texture = fields.get("texture")
    if texture is not None and (texture.ndim != 3 or texture.shape[-1] not in (3, 4) or 0 in texture.shape):
        raise ValueError(f"mesh: texture should be an image [H,W,3], got shape {tuple(texture.shape)}")
    return {
        name: unit_float(value, f"mesh: {name}")[..., :3] if name in ("colors", "texture") else value.float()
        for name, value in fields.items()
    }


def _face_indices(faces: torch.Tensor) -> torch.Tensor:
    """int64 faces from a MESH's faces: integer dtypes as they are, floats only where whole numbers (a
    float index would be truncated to another vertex)."""
    if integral(faces):
        return faces.long()
    if not faces.is_floating_point():
        raise ValueError(f"mesh: faces should be whole vertex indices, got dtype {faces.dtype}")
    fractional = faces != faces.round()  # NaN too
    if bool(fractional.any()):
        raise ValueError(
            f"mesh: faces should be whole vertex indices, got {float(faces[fractional][0])} "
            f"({faces.dtype}); integer indices (or floats without a fraction) are accepted"
        )
    return faces.long()


def shading_inputs(shading: str, fields: dict, matcap) -> dict:
    """The tensors the render's shading needs, checked: texture and uvs, colors, or the matcap image
    (float32 [H,W,3], 0..1) for maps.render_maps' shade."""
    if shading not in SHADINGS:
        raise ValueError(f"shading: expected one of {', '.join(SHADINGS)}, got {short(shading)}")
    if shading == "texture":
        if "uvs" not in fields or "texture" not in fields:
            raise ValueError(
                "shading: texture needs a mesh with UVs and a base-colour texture (a textured "
                ".glb or .obj with its .mtl and image beside it)"
            )
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
            raise ValueError(
                f"matcap: expected an IMAGE [B,H,W,3] (its first image is used), got shape {tuple(matcap.shape)}"
            )
        image = matcap[0] if matcap.ndim == 4 else matcap
        return {"matcap": unit_float(image, "matcap")[..., :3]}
    return {}


def parse_view_list(text: str) -> tuple[list[float], list[float], list[float]]:
    """'azimuth,elevation[,weight]; ...' (degrees; weight 1 where left out) -> azimuths, elevations, weights."""
    azimuths, elevations, weights = [], [], []
    if not isinstance(text, str):
        raise ValueError(f"view_list: expected text 'azimuth,elevation[,weight]; ...', got {short(text)}")
    for item in (part.strip() for part in text.replace("\n", ";").split(";")):
        if not item:
            continue
        if len(azimuths) == MAX_VIEWS:
            raise ValueError(
                f"view_list: more than {MAX_VIEWS:,} views; at most {MAX_VIEWS:,} are rendered at once "
                f"(split the list over several nodes)"
            )
        numbers = _view(item)
        azimuths.append(numbers[0])
        elevations.append(numbers[1])
        weights.append(numbers[2] if len(numbers) == 3 else 1.0)
    if not azimuths:
        raise ValueError("view_list: no views (views=list needs 'azimuth,elevation[,weight]; ...')")
    return azimuths, elevations, weights


def _view(item: str) -> list[float]:
    """One 'azimuth,elevation[,weight]' of a view list as 2 or 3 numbers, checked."""
    try:
        numbers = [float(number) for number in item.split(",")]
    except ValueError:
        numbers = []
    if len(numbers) not in (2, 3) or not all(math.isfinite(n) for n in numbers):
        raise ValueError(f"view_list: expected 'azimuth,elevation[,weight]; ...' in degrees, got {short(item)}")
    if not -90 <= numbers[1] <= 90 or (len(numbers) == 3 and numbers[2] < 0):
        raise ValueError(f"view_list: elevations lie in -90..90 and weights are >= 0, got {short(item)}")
    return numbers


class Load3DCamera(NamedTuple):
    """core Load3D's camera_info, checked: position and target [3], zoom, camera type ("perspective",
    "orthographic" or None where it does not say), vertical fov in degrees and the orthographic view's
    half height (None where camera_info does not carry them: Load3D before its fov was sent)."""

    position: torch.Tensor
    target: torch.Tensor
    zoom: float
    camera_type: str | None
    fov: float | None
    half_height: float | None


def parse_camera_info(info) -> Load3DCamera:
    """core Load3D's camera_info ({"position": {x, y, z}, "target": {x, y, z}, "zoom": z, "cameraType": t},
    newer ones also "fov" and, orthographic, "frustum": {left, right, top, bottom}), checked: finite,
    within MAX_CAMERA_DISTANCE of the origin, position away from target, zoom > 0, fov in (0, 180)."""
    try:
        position = torch.tensor([float(info["position"][axis]) for axis in "xyz"])
        target = torch.tensor([float(info["target"][axis]) for axis in "xyz"])
        zoom = float(info.get("zoom", 1) or 1)
        fov = None if info.get("fov") is None else float(info["fov"])
        frustum = info.get("frustum")
        half_height = None if frustum is None else (float(frustum["top"]) - float(frustum["bottom"])) / 2
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ValueError(
            "camera_info: expected Load3D's camera_info (position, target: x, y, z; zoom; optional fov, "
            f"frustum: left, right, top, bottom), got {short(info)}"
        ) from None
    far = float(torch.cat([position, target]).abs().max())  # NaN where any is NaN
    if far > MAX_CAMERA_DISTANCE:
        raise ValueError(
            f"camera_info: the camera's position or target lies {far:.3g} from the origin; up to "
            f"{MAX_CAMERA_DISTANCE:g} (the distance input's range) is accepted, got {short(info)}"
        )
    distance = float((position - target).norm())
    if not (math.isfinite(distance) and distance > 0 and math.isfinite(zoom) and zoom > 0):
        raise ValueError(
            f"camera_info: the camera needs a finite position away from its target and zoom > 0, got {short(info)}"
        )
    if fov is not None and not 0 < fov < 180:
        raise ValueError(f"camera_info: fov is a vertical angle in degrees, 0 < fov < 180, got {short(info)}")
    if half_height is not None and not (math.isfinite(half_height) and half_height > 0):
        raise ValueError(f"camera_info: the frustum's top must lie above its bottom, got {short(info)}")
    camera_type = {"perspective": "perspective", "orthographic": "orthographic"}.get(info.get("cameraType"))
    return Load3DCamera(position, target, zoom, camera_type, fov, half_height)


def parse_model_info(info) -> tuple[list[float], list[float], list[float]]:
    """position (x, y, z), quaternion (x, y, z, w) and scale (x, y, z) of core Load3D's model_3d_info: a
    list of the viewer's model transforms ({"position": {x, y, z}, "quaternion": {x, y, z, w}, "scale":
    {x, y, z}}; the first is the model's, as core's Render Mesh reads it) or one transform; checked:
    finite, a non-zero quaternion and scale."""
    transform = info[0] if isinstance(info, (list, tuple)) and info else info
    try:
        position = [float(transform["position"][axis]) for axis in "xyz"]
        quaternion = [float(transform["quaternion"][axis]) for axis in "xyzw"]
        scale = [float(transform["scale"][axis]) for axis in "xyz"]
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        raise ValueError(
            "model_3d_info: expected Load3D's model_3d_info (a list of transforms: position x, y, z; "
            f"quaternion x, y, z, w; scale x, y, z), got {short(info)}"
        ) from None
    numbers = position + quaternion + scale
    if not all(math.isfinite(n) and abs(n) <= MAX_COORDINATE for n in numbers):
        raise ValueError(f"model_3d_info: expected finite numbers, got {short(info)}")
    if not any(quaternion) or not all(scale):
        raise ValueError(f"model_3d_info: the quaternion and every scale must be non-zero, got {short(info)}")
    return position, quaternion, scale
