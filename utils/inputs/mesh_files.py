"""What a mesh file declares, read from its headers before anything is decoded: vertex and triangle
counts and the sizes of its texture images, so that a small file that declares a huge mesh or texture
is refused before trimesh allocates it.

Formats: glTF (.gltf, .glb: accessor counts times the scene's instances, image headers from buffer
views, data URIs or files beside it), OBJ (vertex and face lines, the textures its MTL files name),
PLY (element counts), STL (binary count, else facet lines) and OFF (header counts). What a broken
header does not say counts as nothing: trimesh names the problem afterwards.

Also Load Mesh's files: the mesh files of a list of folders (ComfyUI's input folder and the pack's
bundled assets, passed in by the node), a name resolved inside them and nowhere else, and a file loaded
with trimesh after its declared sizes are checked.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import struct
from dataclasses import dataclass, field
from struct import error as struct_error

import torch

from ..core.device import check_memory
from .mesh import mesh_fields
from .text import short

MESH_EXTENSIONS = (".obj", ".glb", ".gltf", ".ply", ".stl", ".off")
# Load Mesh's peak per declared vertex, triangle and texel (trimesh's arrays, ours, the decoded image
# and its float copy: about 170 B a triangle with its share of vertices, and 39 B a texel; no normals are
# made while loading)
LOAD_BYTES_PER_VERTEX = 100
LOAD_BYTES_PER_FACE = 150
LOAD_BYTES_PER_TEXEL = 40
MAX_TEXTURE_PIXELS = 8192 * 8192
# Scene-graph visits counted at most while summing a glTF's instances (cycles, or an absurd scene)
MAX_NODE_VISITS = 1 << 20
# Bytes of a glTF's JSON read at most
MAX_JSON_BYTES = 64 << 20


@dataclass
class Declared:
    """A mesh file's declared vertex and triangle counts and texture sizes (width, height) per image."""

    vertices: int = 0
    faces: int = 0
    textures: list[tuple[int, int]] = field(default_factory=list)


def declared(path: str) -> Declared:
    """The counts and texture sizes the file at `path` declares (see the module docstring); textures and
    buffers are looked up inside the file's folder only, as trimesh does."""
    extension = os.path.splitext(path)[1].lower()
    reader = {".glb": _gltf, ".gltf": _gltf, ".obj": _obj, ".ply": _ply, ".stl": _stl, ".off": _off}[extension]
    with open(path, "rb") as file:
        return reader(file, os.path.dirname(path))


def image_size(data: bytes | str) -> tuple[int, int] | None:
    """(width, height) from an image's header (bytes or a path), without decoding it; None when not an image."""
    from PIL import Image, UnidentifiedImageError

    # Pillow refuses to open images past twice its MAX_IMAGE_PIXELS: those are the sizes to report here
    limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
    try:
        with Image.open(io.BytesIO(data) if isinstance(data, bytes) else data) as image:
            return image.size
    except (OSError, UnidentifiedImageError, ValueError):
        return None
    finally:
        Image.MAX_IMAGE_PIXELS = limit


def _beside(folder: str, name: str) -> str | None:
    """The file `name` relative to `folder` when it lies inside it (symlinks resolved), else None."""
    if not name or "\0" in name or os.path.isabs(name):
        return None
    root = os.path.realpath(folder)
    path = os.path.realpath(os.path.join(root, name))
    try:
        inside = os.path.commonpath([path, root]) == root
    except ValueError:  # another drive on Windows
        return None
    return path if inside and os.path.isfile(path) else None


def _gltf(file, folder: str) -> Declared:
    head = file.read(12)
    binary = None
    if head[:4] == b"glTF":  # GLB: a JSON chunk, then a BIN chunk
        length, kind = struct.unpack("<II", file.read(8))
        if kind != 0x4E4F534A or length > MAX_JSON_BYTES:
            return Declared()
        document = file.read(length)
        chunk = file.read(8)
        if len(chunk) == 8:
            binary_length, _ = struct.unpack("<II", chunk)
            binary = file.read(binary_length)
    else:
        document = head + file.read(MAX_JSON_BYTES)
    try:
        gltf = json.loads(document)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return Declared()
    if not isinstance(gltf, dict):
        return Declared()
    result = Declared()
    accessors = _list(gltf, "accessors")

    def count(index) -> int:
        accessor = accessors[index] if isinstance(index, int) and 0 <= index < len(accessors) else None
        value = accessor.get("count", 0) if isinstance(accessor, dict) else 0
        return value if isinstance(value, int) and value > 0 else 0

    meshes = []
    for mesh in _list(gltf, "meshes"):
        vertices = faces = 0
        for primitive in _list(mesh, "primitives"):
            attributes = primitive.get("attributes", {}) if isinstance(primitive, dict) else {}
            positions = count(attributes.get("POSITION")) if isinstance(attributes, dict) else 0
            vertices += positions
            indices = primitive.get("indices")
            faces += (count(indices) if indices is not None else positions) // 3
        meshes.append((vertices, faces))
    for mesh, uses in _mesh_uses(gltf, len(meshes)).items():
        result.vertices += meshes[mesh][0] * uses
        result.faces += meshes[mesh][1] * uses
    views, buffers = _list(gltf, "bufferViews"), _list(gltf, "buffers")
    for image in _list(gltf, "images"):
        data = _image_bytes(image, views, buffers, binary, folder) if isinstance(image, dict) else None
        size = image_size(data) if data is not None else None
        if size is not None:
            result.textures.append(size)
    return result


def _list(document, key: str) -> list:
    value = document.get(key, []) if isinstance(document, dict) else []
    return value if isinstance(value, list) else []


def _mesh_uses(gltf: dict, mesh_count: int) -> dict[int, int]:
    """How often each mesh appears in the scenes (instances multiply through the node tree); every mesh
    once where no scene places it (trimesh then loads them all)."""
    nodes = _list(gltf, "nodes")
    uses: dict[int, int] = {}
    stack = [root for scene in _list(gltf, "scenes") for root in _list(scene, "nodes")]
    visits = 0
    while stack and visits < MAX_NODE_VISITS:
        index = stack.pop()
        node = nodes[index] if isinstance(index, int) and 0 <= index < len(nodes) else None
        if not isinstance(node, dict):
            continue
        visits += 1
        mesh = node.get("mesh")
        if isinstance(mesh, int) and 0 <= mesh < mesh_count:
            uses[mesh] = uses.get(mesh, 0) + 1
        stack.extend(_list(node, "children"))
    if stack:  # past the visit limit: a scene that deep or wide is as heavy as its limit
        return {mesh: MAX_NODE_VISITS for mesh in range(mesh_count)}
    return uses or dict.fromkeys(range(mesh_count), 1)


def _image_bytes(image: dict, views: list, buffers: list, binary: bytes | None, folder: str):
    """An image's bytes (a buffer view of the GLB's BIN chunk or of a buffer file, or a data URI) or
    its file's path beside the glTF; None where it cannot be found."""
    uri = image.get("uri")
    if isinstance(uri, str):
        if uri.startswith("data:"):
            try:
                return base64.b64decode(uri.partition(",")[2], validate=False)
            except ValueError:
                return None
        return _beside(folder, uri)
    index = image.get("bufferView")
    view = views[index] if isinstance(index, int) and 0 <= index < len(views) else None
    if not isinstance(view, dict):
        return None
    start, length = view.get("byteOffset", 0), view.get("byteLength", 0)
    buffer_index = view.get("buffer", 0)
    buffer = buffers[buffer_index] if isinstance(buffer_index, int) and 0 <= buffer_index < len(buffers) else None
    if not (isinstance(start, int) and isinstance(length, int) and isinstance(buffer, dict)):
        return None
    if isinstance(buffer.get("uri"), str):
        path = _beside(folder, buffer["uri"])
        if path is None:
            return None
        with open(path, "rb") as file:
            file.seek(max(0, start))
            return file.read(max(0, length))
    return binary[start : start + length] if binary is not None else None


def _obj(file, folder: str) -> Declared:
    data = file.read()
    lines = b"\n" + data
    result = Declared(vertices=lines.count(b"\nv "), faces=0)
    for line in re.findall(rb"\n[ \t]*f[ \t]+([^\n]*)", lines):
        result.faces += max(1, len(line.split()) - 2)  # a polygon of n corners: n - 2 triangles
    for library in re.findall(rb"\n[ \t]*mtllib[ \t]+([^\r\n]+)", lines):
        path = _beside(folder, library.decode("utf-8", "replace").strip())
        if path is None:
            continue
        with open(path, "rb") as mtl:
            for name in re.findall(rb"\n[ \t]*map_\w+[ \t]+(?:-\S+[ \t]+\S+[ \t]+)*([^\r\n]+)", b"\n" + mtl.read()):
                image = _beside(folder, name.decode("utf-8", "replace").strip())
                size = image_size(image) if image is not None else None
                if size is not None:
                    result.textures.append(size)
    return result


def _ply(file, folder: str) -> Declared:
    result = Declared()
    header = file.read(1 << 16).split(b"end_header")[0]
    for line in header.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == b"element" and words[2].isdigit():
            if words[1] == b"vertex":
                result.vertices = int(words[2])
            elif words[1] == b"face":
                result.faces = int(words[2])
    return result


def _stl(file, folder: str) -> Declared:
    head = file.read(84)
    size = os.fstat(file.fileno()).st_size
    if len(head) == 84 and size == 84 + 50 * struct.unpack("<I", head[80:])[0]:  # binary
        faces = struct.unpack("<I", head[80:])[0]
    else:
        faces = (head + file.read()).count(b"facet normal")
    return Declared(vertices=3 * faces, faces=faces)


def _off(file, folder: str) -> Declared:
    words = []
    for line in file.read(1 << 16).splitlines():
        line = line.split(b"#")[0].strip()
        if line:
            words += line.split()
        if len(words) >= 4:  # "OFF" and the counts, or the counts and a first vertex
            break
    numbers = words[1:3] if words and words[0].endswith(b"OFF") else words[:2]
    if len(numbers) == 2 and all(number.isdigit() for number in numbers):
        return Declared(vertices=int(numbers[0]), faces=int(numbers[1]))
    return Declared()


def _roots(folders) -> list[str]:
    """The folders of `folders` (None or missing ones left out) that meshes are read from, symlinks resolved."""
    return [os.path.realpath(folder) for folder in folders if folder and os.path.isdir(folder)]


def _inside(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # another drive on Windows
        return False


def mesh_files(folders) -> list[str]:
    """Mesh files of the folders and their subfolders ("/"-separated names relative to the folder), the
    first folder's first, then those of each next folder that the ones before do not shadow; links that
    lead outside are left out."""
    names: dict[str, None] = {}  # an ordered set: the first folder's names first
    for root in _roots(folders):
        found = []
        for folder, subfolders, files in os.walk(root):
            subfolders[:] = sorted(s for s in subfolders if not s.startswith("."))
            for file in files:
                path = os.path.join(folder, file)
                # regular files only: a FIFO or a device named like a mesh would block or stream forever
                if (
                    file.lower().endswith(MESH_EXTENSIONS)
                    and _inside(os.path.realpath(path), root)
                    and os.path.isfile(path)
                ):
                    found.append(os.path.relpath(path, root).replace(os.sep, "/"))
        names.update(dict.fromkeys(sorted(found)))
    return list(names)


def resolve_mesh_file(name: str, folders) -> str:
    """The real path of mesh file `name` (relative to the first of `folders` that has it). Absolute names,
    `..` and symlinks that lead outside those folders are refused with the same error as a missing file,
    which names the input only by the name given, so errors tell nothing about the disk."""
    if not isinstance(name, str):
        raise ValueError(f"mesh_file: expected a file name (text), got {short(name)}")
    name = name.strip()
    shown = name if len(name) <= 200 else name[:200] + "..."
    if not name.lower().endswith(MESH_EXTENSIONS):
        raise ValueError(f"mesh_file: {shown!r} is not one of {', '.join(MESH_EXTENSIONS)}")
    if not os.path.isabs(name) and "\0" not in name:
        for root in _roots(folders):
            path = os.path.realpath(os.path.join(root, name))
            if _inside(path, root) and os.path.isfile(path):
                return path
    raise ValueError(
        f"mesh_file: no mesh file {shown!r} in ComfyUI's input folder (choose one from the list, "
        f"or upload one with the node's button)"
    )


def load_mesh_file(path: str, name: str, normalize: bool):
    """The mesh at `path` (resolve_mesh_file's; `name` as the user gave it, for errors): vertices float32
    [1,V,3] (centred and scaled to fit the cube [-1, 1] where normalize), faces int64 [1,F,3], the optional
    MESH fields (mesh_fields) and the trimesh.Trimesh. Declared sizes are checked before decoding."""
    import trimesh

    check_declared(path, name)
    try:
        # trimesh >= 5.2 (requirements.txt) resolves textures and buffers inside the mesh's folder only
        # and fetches nothing remote
        loaded = _load_meshes(path)
    except Exception as error:  # trimesh raises many types for broken files
        raise ValueError(f"mesh_file: could not read {short(name)}: {_reason(error)}") from None
    if len(getattr(loaded, "faces", ())) == 0:
        raise ValueError(f"mesh_file: {name!r} has no triangles")
    vertices = torch.tensor(loaded.vertices, dtype=torch.float32)
    fields = mesh_fields(loaded)
    if normalize:  # a translation and a uniform scale: the normals stay
        low, high = vertices.amin(0), vertices.amax(0)
        vertices = (vertices - (low + high) / 2) * (2 / float((high - low).max().clamp_min(1e-12)))
        normals = fields["normals"][0].numpy() if "normals" in fields else None
        loaded = trimesh.Trimesh(
            vertices.numpy(), loaded.faces, visual=loaded.visual, vertex_normals=normals, process=False
        )
    return vertices[None], torch.tensor(loaded.faces, dtype=torch.int64)[None], fields, loaded


def _load_meshes(path: str):
    """trimesh.load(path, force="mesh", process=False), keeping the normals the file stores: the file's
    meshes moved to where its scene puts them (their normals turned with them), in one trimesh. (trimesh's
    own Scene.to_mesh copies each mesh without its cache, which holds a file's normals.)"""
    import trimesh

    scene = trimesh.load_scene(path, process=False)
    parts = []
    for node in scene.graph.nodes_geometry:
        transform, name = scene.graph[node]
        if isinstance(scene.geometry[name], trimesh.Trimesh):
            part = scene.geometry[name].copy(include_cache=True)
            part.apply_transform(transform)
            parts.append(part)
    return parts[0] if len(parts) == 1 else trimesh.util.concatenate(parts)  # (it copies a single one too)


def check_declared(path: str, name: str) -> None:
    """Refuse, before decoding, a file whose header declares textures over MAX_TEXTURE_PIXELS or a mesh and
    textures that would not fit in memory (`declared` reads the counts and image headers)."""
    try:
        counts = declared(path)
    except (OSError, ValueError, struct_error):
        return  # unreadable headers: trimesh names the problem
    for width, height in counts.textures:
        if width * height > MAX_TEXTURE_PIXELS:
            raise ValueError(
                f"mesh_file: {short(name)} has a {width}x{height} texture; textures of up to "
                f"{MAX_TEXTURE_PIXELS:,} texels (8192 x 8192) are read"
            )
    estimate = (
        LOAD_BYTES_PER_VERTEX * counts.vertices
        + LOAD_BYTES_PER_FACE * counts.faces
        + LOAD_BYTES_PER_TEXEL * sum(width * height for width, height in counts.textures)
    )
    check_memory(
        estimate,
        f"mesh_file: {short(name)} ({counts.vertices:,} vertices, {counts.faces:,} "
        f"triangles, {len(counts.textures)} textures)",
        torch.device("cpu"),
    )


def _reason(error: BaseException) -> str:
    """What went wrong reading a file, for the UI: the exception's type and message, with paths left out
    (they would tell where ComfyUI's folders are, or probe outside them)."""
    text = re.sub(r"([A-Za-z]:)?([\\/][^\s'\"\\/]+)+[\\/]?", "<path>", str(error)).strip()
    text = text if len(text) <= 200 else text[:200] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
