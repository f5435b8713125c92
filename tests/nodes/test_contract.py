"""Every node against its V1 and V3 schemas, without ComfyUI: the V3 form is built against a
stand-in for comfy_api.latest.io that records what the node declares."""

import json
import re
import types
from pathlib import Path

import pytest
import torch

import rasterkit as PACK  # loaded by conftest.py
from node_inputs import WIDGETS, tiny_inputs
from rasterkit.nodes import NODE_CLASSES
from rasterkit.nodes._schema import combo_options, to_v3, v1_mappings

# comfy_api.latest.io's typed socket classes in ComfyUI 0.3.64 (pyproject's requires-comfyui), by class
# name: what a node should declare its sockets with; io.Custom(name) is for the types core lacks
CORE_IO = {
    "Boolean": "BOOLEAN",
    "Int": "INT",
    "Float": "FLOAT",
    "String": "STRING",
    "Combo": "COMBO",
    "Image": "IMAGE",
    "WanCameraEmbedding": "WAN_CAMERA_EMBEDDING",
    "Webcam": "WEBCAM",
    "Mask": "MASK",
    "Latent": "LATENT",
    "Conditioning": "CONDITIONING",
    "Sampler": "SAMPLER",
    "Sigmas": "SIGMAS",
    "Noise": "NOISE",
    "Guider": "GUIDER",
    "Clip": "CLIP",
    "ControlNet": "CONTROL_NET",
    "Vae": "VAE",
    "Model": "MODEL",
    "ClipVision": "CLIP_VISION",
    "ClipVisionOutput": "CLIP_VISION_OUTPUT",
    "StyleModel": "STYLE_MODEL",
    "Gligen": "GLIGEN",
    "UpscaleModel": "UPSCALE_MODEL",
    "Audio": "AUDIO",
    "Video": "VIDEO",
    "SVG": "SVG",
    "LoraModel": "LORA_MODEL",
    "LossMap": "LOSS_MAP",
    "Voxel": "VOXEL",
    "Mesh": "MESH",
    "Hooks": "HOOKS",
    "HookKeyframes": "HOOK_KEYFRAMES",
    "TimestepsRange": "TIMESTEPS_RANGE",
    "LatentOperation": "LATENT_OPERATION",
    "FlowControl": "FLOW_CONTROL",
    "Accumulation": "ACCUMULATION",
    "Load3DCamera": "LOAD3D_CAMERA",
    "Load3D": "LOAD_3D",
    "Load3DAnimation": "LOAD_3D_ANIMATION",
    "Photomaker": "PHOTOMAKER",
    "Point": "POINT",
    "FaceAnalysis": "FACE_ANALYSIS",
    "BBOX": "BBOX",
    "SEGS": "SEGS",
    "MODEL_PATCH": "MODEL_PATCH",
    "AudioEncoder": "AUDIO_ENCODER",
    "AudioEncoderOutput": "AUDIO_ENCODER_OUTPUT",
}


def fake_io():
    """The parts of comfy_api.latest.io that nodes/_schema.py uses, recording their arguments and which
    class made each socket (`comfy_type`: core's class name, or "Custom")."""

    class Recorded:
        def __init__(self, *args, **kwargs):
            self.args, self.kwargs = args, kwargs

    def comfy_type(io_type, name="Custom"):
        members = {"io_type": io_type, "comfy_type": name}
        return types.SimpleNamespace(
            io_type=io_type, Input=type("Input", (Recorded,), members), Output=type("Output", (Recorded,), members)
        )

    return types.SimpleNamespace(
        **{name: comfy_type(io_type, name) for name, io_type in CORE_IO.items()},
        Custom=comfy_type,
        Schema=Recorded,
        NodeOutput=Recorded,
        ComfyNode=object,
    )


ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "example_workflows" / "assets"


def check_output(value, declared, node_id, name):
    if declared == "IMAGE":
        assert isinstance(value, torch.Tensor) and value.ndim == 4 and value.shape[-1] in (3, 4), (node_id, name)
        assert value.dtype == torch.float32, (node_id, name)
    elif declared == "MASK":
        assert isinstance(value, torch.Tensor) and value.ndim == 3 and value.dtype == torch.float32, (node_id, name)
    elif declared == "STRING":
        assert isinstance(value, str), (node_id, name)
    elif declared == "MESH":
        assert value.vertices.ndim == 3 and value.faces.ndim == 3, (node_id, name)
    else:
        assert value is not None, (node_id, name)


def test_node_ids_are_prefixed_and_unique():
    ids = [n.NODE_ID for n in NODE_CLASSES]
    assert len(ids) == len(set(ids))
    assert all(i.startswith("RasterKit_") for i in ids)
    mappings, names = v1_mappings(NODE_CLASSES)
    assert set(mappings) == set(names) == set(ids)


def test_package_registers_v1_without_comfyui():
    assert set(PACK.NODE_CLASS_MAPPINGS) == {n.NODE_ID for n in NODE_CLASSES}
    assert PACK.WEB_DIRECTORY == "./web/js"


def test_node_list_json_names_every_node_for_comfyui_managers_scanner():
    """ComfyUI-Manager maps node ids to packs from literal NODE_CLASS_MAPPINGS keys, V3 Schema(node_id=...)
    literals, or a node_list.json at the root; this pack builds both registrations from NODE_CLASSES,
    so node_list.json ({node id: display name}) is what its scanner reads."""
    listed = json.loads((ROOT / "node_list.json").read_text())
    assert listed == {n.NODE_ID: n.DISPLAY_NAME for n in NODE_CLASSES}


# "NN Title": the index orders the template browser's cards (web/js/rasterkit.js sorts the pack's by name)
TEMPLATE_NAME = re.compile(r"(\d{2}) ([A-Z][^._#?%]* [^._#?%]*)")


def test_example_workflows_are_named_as_titles_with_a_colour_thumbnail_and_an_api_twin():
    """ComfyUI's template browser titles a custom node's template by its file name and shows <name>.jpg
    as its card; tools/make_example_workflows.py builds both from tests/workflows/<name>.api.json."""
    import numpy as np
    from PIL import Image

    examples = ASSETS.parent
    names = sorted(path.stem for path in examples.glob("*.json"))
    api_files = (ROOT / "tests" / "workflows").glob("*.api.json")
    assert names == sorted(path.name.removesuffix(".api.json") for path in api_files)
    indices = [TEMPLATE_NAME.fullmatch(name) and int(TEMPLATE_NAME.fullmatch(name)[1]) for name in names]
    assert indices == list(range(1, len(names) + 1)), f"{names}: not each an index 01, 02, ... and a title"
    for name in names:
        thumbnail = np.asarray(Image.open(examples / f"{name}.jpg").convert("RGB"), dtype=np.int16)
        assert max(thumbnail.shape[:2]) <= 512
        assert (thumbnail.max(-1) - thumbnail.min(-1)).max() > 64, f"{name}.jpg is grey: a mask, not the result?"


def test_readme_quick_start_names_every_example_workflow():
    quick_start = " ".join((ROOT / "README.md").read_text().split("## Quick start")[1].split("\n## ")[0].split())
    for path in sorted(ASSETS.parent.glob("*.json")):
        title = TEMPLATE_NAME.fullmatch(path.stem)[2]
        assert f"*{title}*" in quick_start, f"README's Quick start does not name the template {title}"


def readme_node_table() -> dict[str, tuple[list[str], list[str]]]:
    """{node id: (input names, output names)} as the README's node table lists them, notes in brackets left out."""
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        match = re.fullmatch(r"\| [^|]*\(`(RasterKit_\w+)`\) \| ([^|]*) \| ([^|]*) \|", line)
        if match:
            inputs, outputs = (re.sub(r"\([^()]*(\([^()]*\)[^()]*)*\)", "", cell) for cell in match.groups()[1:])
            rows[match[1]] = (
                [name.strip() for name in re.split(r";|,| or ", inputs) if name.strip()],
                [name.strip() for name in outputs.split(",")],
            )
    return rows


@pytest.mark.parametrize("node", NODE_CLASSES, ids=lambda n: n.NODE_ID)
def test_readme_node_table_lists_every_input_and_output(node):
    inputs, outputs = readme_node_table()[node.NODE_ID]
    assert len(inputs) == len(set(inputs)) and set(inputs) == {s.name for s in node.INPUTS}, (
        f"README's node table, {node.NODE_ID}: missing {sorted({s.name for s in node.INPUTS} - set(inputs))}, "
        f"not inputs {sorted(set(inputs) - {s.name for s in node.INPUTS})}"
    )
    assert outputs == [o.name for o in node.OUTPUTS], node.NODE_ID


@pytest.mark.parametrize(
    "api_file",
    sorted((ROOT / "tests" / "workflows").glob("*.api.json")),
    ids=lambda path: path.name.removesuffix(".api.json"),
)
def test_example_workflows_give_the_pack_nodes_every_input_they_declare_today(api_file):
    """What the live tests check against a server, for this pack's nodes and without one: the API prompt
    names every required input, and the UI workflow holds one widget value per widget (in the order the
    frontend lays them out: required, then optional) equal to the prompt's, so an input added to a node
    cannot leave its example behind."""
    nodes = {n.NODE_ID: n for n in NODE_CLASSES}
    prompt = json.loads(api_file.read_text())
    ui = json.loads((ASSETS.parent / api_file.name.replace(".api.json", ".json")).read_text())
    ui_nodes = {str(n["id"]): n for n in ui["nodes"]}
    for key, entry in prompt.items():
        node = nodes.get(entry["class_type"])
        if node is None:
            continue
        inputs = entry["inputs"]
        assert {s.name for s in node.INPUTS if not s.optional} <= set(inputs), (api_file.name, node.NODE_ID)
        widgets = [s for s in sorted(node.INPUTS, key=lambda s: s.optional) if s.type in WIDGETS | {"COMBO"}]
        expected = []
        for spec in widgets:
            linked = isinstance(inputs.get(spec.name), list)
            expected.append(spec.default if linked or spec.name not in inputs else inputs[spec.name])
            if spec.name == "seed":
                expected.append("fixed")  # the frontend's control_after_generate value
        assert ui_nodes[key]["widgets_values"] == expected, (api_file.name, node.NODE_ID)


@pytest.mark.parametrize("node", NODE_CLASSES, ids=lambda n: n.NODE_ID)
def test_v1_schema(node):
    schema = node.INPUT_TYPES()
    assert set(schema) <= {"required", "optional"}
    names = [spec.name for spec in node.INPUTS]
    assert len(names) == len(set(names))
    assert list(schema["required"]) + list(schema.get("optional", {})) == [
        s.name for s in node.INPUTS if not s.optional
    ] + [s.name for s in node.INPUTS if s.optional]
    for spec in node.INPUTS:
        kind, options = (schema["optional"] if spec.optional else schema["required"])[spec.name]
        if spec.type == "COMBO":
            assert kind == combo_options(spec) and options["default"] in kind, spec.name
        else:
            assert kind == spec.type
        if spec.type in ("INT", "FLOAT"):
            assert options["min"] <= options["default"] <= options["max"], spec.name
            assert isinstance(options["default"], int if spec.type == "INT" else (int, float))
    assert len(node.RETURN_TYPES) == len(node.RETURN_NAMES) == len(node.OUTPUTS) > 0
    assert callable(getattr(node(), node.FUNCTION))
    assert node.CATEGORY.startswith("RasterKit") and node.DESCRIPTION


@pytest.mark.parametrize("node", NODE_CLASSES, ids=lambda n: n.NODE_ID)
def test_every_input_and_output_has_a_tooltip(node):
    missing = [spec.name for spec in node.INPUTS if not spec.tooltip]
    missing += [f"output {o.name}" for o in node.OUTPUTS if not o.tooltip]
    assert not missing, f"{node.NODE_ID}: no tooltip for {', '.join(missing)}"
    assert len(node.OUTPUT_TOOLTIPS) == len(node.OUTPUTS) and all(node.OUTPUT_TOOLTIPS)
    for section in node.INPUT_TYPES().values():
        assert all(options.get("tooltip") for _, options in section.values())
    schema = to_v3(node, fake_io()).define_schema()
    assert all(recorded.kwargs["tooltip"] for recorded in schema.kwargs["inputs"] + schema.kwargs["outputs"])


@pytest.mark.parametrize("node", NODE_CLASSES, ids=lambda n: n.NODE_ID)
def test_run_defaults_are_the_widgets_defaults(node):
    """A call from Python or a test (run's own defaults) computes what a new node in the graph does. The
    settings, that is: text inputs and file lists hold sample data in the graph and nothing in run."""
    import inspect

    parameters = inspect.signature(node.run).parameters
    settings = [
        spec
        for spec in node.INPUTS
        if spec.type in ("INT", "FLOAT", "BOOLEAN") or (spec.type == "COMBO" and not callable(spec.options))
    ]
    differ = {
        spec.name: (parameters[spec.name].default, spec.default)
        for spec in settings
        if spec.name in parameters
        and parameters[spec.name].default is not inspect.Parameter.empty
        and parameters[spec.name].default != spec.default
    }
    assert not differ, f"{node.NODE_ID}: run default vs widget default: {differ}"


@pytest.mark.parametrize("node", NODE_CLASSES, ids=lambda n: n.NODE_ID)
def test_v3_schema_matches_v1(node):
    io = fake_io()
    v3 = to_v3(node, io)
    schema = v3.define_schema()
    assert schema.kwargs["node_id"] == node.NODE_ID
    inputs = schema.kwargs["inputs"]
    assert [i.args[0] for i in inputs] == [s.name for s in node.INPUTS]
    for recorded, spec in zip(inputs, node.INPUTS, strict=True):
        assert recorded.io_type == spec.type
        assert recorded.kwargs["optional"] == spec.optional
        if spec.type in WIDGETS | {"COMBO"}:
            assert recorded.kwargs["default"] == spec.default
    assert [o.io_type for o in schema.kwargs["outputs"]] == list(node.RETURN_TYPES)


@pytest.mark.parametrize("node", NODE_CLASSES, ids=lambda n: n.NODE_ID)
def test_outputs_have_declared_types_on_tiny_input(node):
    outputs = node.run(**tiny_inputs(node))
    assert isinstance(outputs, tuple) and len(outputs) == len(node.OUTPUTS)
    for value, declared in zip(outputs, node.OUTPUTS, strict=True):
        check_output(value, declared.type, node.NODE_ID, declared.name)
    result = to_v3(node, fake_io()).execute(**tiny_inputs(node))
    assert len(result.args) == len(node.OUTPUTS)
    v1 = getattr(node(), node.FUNCTION)(**tiny_inputs(node))  # without ComfyUI there is no preview
    assert isinstance(v1, tuple) and len(v1) == len(node.OUTPUTS)


@pytest.mark.parametrize("node", NODE_CLASSES, ids=lambda n: n.NODE_ID)
def test_v3_sockets_of_core_types_use_the_typed_classes(node):
    """IMAGE, MASK, AUDIO, MESH, ... through io.Image, io.Mask, ... (ComfyUI checks and documents them
    by their class); io.Custom only for the pack's own types (TRACKS, RASTER, TRIMESH, ...)."""
    schema = to_v3(node, fake_io()).define_schema()
    core = {io_type: name for name, io_type in CORE_IO.items()}
    for recorded in schema.kwargs["inputs"] + schema.kwargs["outputs"]:
        assert recorded.comfy_type == core.get(recorded.io_type, "Custom"), (node.NODE_ID, recorded.io_type)


def test_v3_entrypoint_gives_a_named_extension_listing_every_node(monkeypatch):
    """Under ComfyUI with the V3 API the pack defines comfy_entrypoint (and no NODE_CLASS_MAPPINGS), which
    gives a RasterKitExtension whose node list is every node's V3 form. The pack is loaded anew, as
    rasterkit_v3, beside a stand-in comfy_api."""
    import abc
    import asyncio
    import sys

    from demo import load_pack

    class ComfyExtension(abc.ABC):
        @abc.abstractmethod
        async def get_node_list(self): ...

    latest = types.ModuleType("comfy_api.latest")
    latest.ComfyExtension, latest.io = ComfyExtension, fake_io()
    comfy_api = types.ModuleType("comfy_api")
    comfy_api.latest = latest
    monkeypatch.setitem(sys.modules, "comfy_api", comfy_api)
    monkeypatch.setitem(sys.modules, "comfy_api.latest", latest)
    try:
        pack = load_pack("rasterkit_v3")
        extension = asyncio.run(pack.comfy_entrypoint())
        v3_nodes = asyncio.run(extension.get_node_list())
    finally:
        for name in [name for name in sys.modules if name.split(".")[0] == "rasterkit_v3"]:
            del sys.modules[name]
    assert not hasattr(pack, "NODE_CLASS_MAPPINGS")
    assert type(extension).__name__ == "RasterKitExtension" and isinstance(extension, ComfyExtension)
    assert [n.define_schema().kwargs["node_id"] for n in v3_nodes] == [n.NODE_ID for n in NODE_CLASSES]


def test_core_tracks_are_declared_by_name_on_comfyui_without_io_tracks():
    """ComfyUI 0.3.64's io has no Tracks class (fake_io is that io): Point Tracker's core_tracks output and
    the TRACKS inputs are io.Custom("TRACKS"), the type name core's io.Tracks has, so that they connect
    to the WanMove nodes where core has them and the pack loads where it does not."""
    from rasterkit.nodes.links import PointTracker
    from rasterkit.nodes.tracks import TrackTrails

    assert not hasattr(fake_io(), "Tracks")
    outputs = to_v3(PointTracker, fake_io()).define_schema().kwargs["outputs"]
    assert [(o.io_type, o.comfy_type) for o in outputs][2] == ("TRACKS", "Custom")
    inputs = {i.args[0]: i for i in to_v3(TrackTrails, fake_io()).define_schema().kwargs["inputs"]}
    assert (inputs["tracks"].io_type, inputs["tracks"].comfy_type) == ("TRACKS", "Custom")


def test_core_bounding_box_is_declared_by_name_on_comfyui_without_io_bounding_box():
    """ComfyUI 0.3.64's io has no BoundingBox class: the Box Editor's bounding_box output and the Bounding
    Box Renderer's input are io.Custom("BOUNDING_BOX"), the type name of core's io.BoundingBox, so that they
    connect to SAM3 Detect, RT-DETR Detect and Draw BBoxes where core has them and the pack loads where not."""
    from rasterkit.nodes.boxes import BoundingBoxRenderer
    from rasterkit.nodes.editors import BoxEditor

    assert not hasattr(fake_io(), "BoundingBox")
    outputs = to_v3(BoxEditor, fake_io()).define_schema().kwargs["outputs"]
    assert (outputs[0].io_type, outputs[0].comfy_type) == ("BOUNDING_BOX", "Custom")
    inputs = {i.args[0]: i for i in to_v3(BoundingBoxRenderer, fake_io()).define_schema().kwargs["inputs"]}
    assert (inputs["bounding_box"].io_type, inputs["bounding_box"].comfy_type) == ("BOUNDING_BOX", "Custom")


# Every node's required inputs. A new input must be optional: API prompts saved before it then still
# validate (ComfyUI refuses a prompt that lacks a required input), and UI workflows keep their widgets.
REQUIRED_INPUTS = {
    "RasterKit_UVMaps": ["mesh", "texture_size", "dilation"],
    "RasterKit_BakeTexture": [
        "mesh",
        "images",
        "raster",
        "texture_size",
        "dilation",
        "exponent",
        "depth_tolerance",
        "inpaint",
    ],
    "RasterKit_BoundingBoxRenderer": [
        "images",
        "boxes",
        "stroke_width",
        "corner_radius",
        "stroke_opacity",
        "fill_opacity",
        "color",
        "palette",
        "color_by",
        "labels",
        "label_size",
        "corner_length",
        "layer_alpha",
        "font",
        "palette_colors",
        "label_anchor",
        "text_color",
        "label_padding",
        "label_max_width",
        "label_avoid_overlap",
        "marker",
        "marker_size",
    ],
    "RasterKit_BoxEditor": ["boxes", "points", "negative_points", "width", "height", "snap", "frames"],
    "RasterKit_PointTracker": ["images", "max_points", "quality", "min_distance", "max_error"],
    "RasterKit_LineLinkRenderer": [
        "images",
        "tracks_json",
        "k",
        "max_distance",
        "delta_y_cap",
        "degree_cap",
        "mutual",
        "hysteresis",
        "curve",
        "curvature",
        "width",
        "opacity",
        "color",
        "point_radius",
        "layer_alpha",
        "graph",
        "line_style",
        "dash_length",
        "gap_length",
        "dash_phase",
        "dash_speed",
        "end_color",
        "glow",
        "glow_scale",
        "width_by_length",
        "point_style",
        "marker_glow",
        "trail_frames",
        "trail_smooth",
        "point_labels",
        "text_size",
        "text_color",
    ],
    "RasterKit_MaskRenderer": [
        "images",
        "opacity",
        "outline_width",
        "outline_opacity",
        "halo_width",
        "halo_opacity",
        "mask_threshold",
        "color",
        "palette",
        "color_by",
        "labels",
        "label_position",
        "label_size",
        "font",
        "palette_colors",
        "layer_alpha",
    ],
    "RasterKit_LoadMesh": ["mesh_file", "normalize"],
    "RasterKit_MeshRasterizer": [
        "width",
        "height",
        "views",
        "azimuth",
        "elevation",
        "distance",
        "projection",
        "fov",
        "cull_back_faces",
        "turn_six_views",
        "normal_space",
        "depth_mode",
        "shading",
        "light_azimuth",
        "light_elevation",
        "antialias",
        "view_list",
        "ortho_scale",
    ],
    "RasterKit_PrimitiveMesh": [
        "image",
        "shapes",
        "shape_type",
        "alpha",
        "candidates",
        "mutations",
        "working_size",
        "output_size",
        "seed",
        "background",
        "shape_kinds",
        "frames",
    ],
    "RasterKit_SeriesToImages": [
        "series",
        "csv_series",
        "width",
        "height",
        "mode",
        "line_width",
        "line_color",
        "background",
        "fill",
        "fill_color",
        "scale",
        "frames",
        "fps",
        "audio_plot",
        "fft_size",
        "bands",
        "magnitude",
        "smoothing",
        "style",
        "overlay",
        "colors",
    ],
    "RasterKit_TrackTrails": [
        "images",
        "trail_length",
        "future_length",
        "line_width",
        "fade",
        "opacity",
        "head",
        "head_size",
        "color",
        "palette",
        "layer_alpha",
        "tracks_json",
    ],
}


@pytest.mark.parametrize("node", NODE_CLASSES, ids=lambda n: n.NODE_ID)
def test_no_input_becomes_required(node):
    assert [s.name for s in node.INPUTS if not s.optional] == REQUIRED_INPUTS[node.NODE_ID]
