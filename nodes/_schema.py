"""One definition per node; the V1 (NODE_CLASS_MAPPINGS) and V3 (comfy_api io) forms derive from it.

A node is a subclass of `RasterKitNode` with class attributes NODE_ID, DISPLAY_NAME, CATEGORY,
DESCRIPTION, INPUTS (a list of `Input`), OUTPUTS (a list of `Output`), a classmethod
`run(**inputs) -> tuple`, optionally `preview(inputs, outputs) -> dict` (data for the frontend) and
`fingerprint(**inputs)` (V1's IS_CHANGED, V3's fingerprint_inputs: a value that changes when the
node must rerun with the same inputs, e.g. an edited input file).
The subclass itself is the V1 node; `to_v3(node, io)` builds the V3 one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..utils.inputs.text import short


@dataclass(frozen=True)
class Input:
    name: str
    type: str
    default: Any = None
    min: float | None = None
    max: float | None = None
    step: float | None = None
    options: tuple | Callable[[], list] = ()  # a callable is asked anew for every schema (file lists)
    multiline: bool = False
    optional: bool = False
    tooltip: str | None = None


def Int(name, default, min, max, step=1, **kw) -> Input:
    return Input(name, "INT", default, min, max, step, **kw)


def Float(name, default, min, max, step=0.01, **kw) -> Input:
    return Input(name, "FLOAT", default, min, max, step, **kw)


def String(name, default="", multiline=False, **kw) -> Input:
    return Input(name, "STRING", default, multiline=multiline, **kw)


def Bool(name, default, **kw) -> Input:
    return Input(name, "BOOLEAN", default, **kw)


def Combo(name, options, default=None, **kw) -> Input:
    """A choice among `options`: a sequence, or a function returning the current list (asked anew
    each time ComfyUI reads the schema)."""
    if not callable(options):
        options = tuple(options)
        default = options[0] if default is None else default
    return Input(name, "COMBO", default, options=options, **kw)


def combo_options(spec: Input) -> list:
    return list(spec.options() if callable(spec.options) else spec.options)


def Socket(name, type, optional=False, **kw) -> Input:
    """A connection-only input (IMAGE, MASK, TRACKS, ...)."""
    return Input(name, type, optional=optional, **kw)


@dataclass(frozen=True)
class Output:
    type: str
    name: str
    tooltip: str | None = None


class RasterKitNode:
    NODE_ID: ClassVar[str]
    DISPLAY_NAME: ClassVar[str]
    CATEGORY: ClassVar[str] = "RasterKit"
    DESCRIPTION: ClassVar[str] = ""
    INPUTS: ClassVar[list[Input]] = []
    OUTPUTS: ClassVar[list[Output]] = []
    OUTPUT_NODE: ClassVar[bool] = False

    FUNCTION = "execute"  # V1: ComfyUI calls getattr(instance, FUNCTION)(**inputs)

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.RETURN_TYPES = tuple(o.type for o in cls.OUTPUTS)
        cls.RETURN_NAMES = tuple(o.name for o in cls.OUTPUTS)
        cls.OUTPUT_TOOLTIPS = tuple(o.tooltip or "" for o in cls.OUTPUTS)
        if "fingerprint" in cls.__dict__:
            cls.IS_CHANGED = cls.fingerprint

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        """The V1 schema: {"required": {name: (type, options)}, "optional": {...}}."""
        required, optional = {}, {}
        for spec in cls.INPUTS:
            (optional if spec.optional else required)[spec.name] = _v1_entry(spec)
        return {"required": required, "optional": optional} if optional else {"required": required}

    @classmethod
    def run(cls, **inputs) -> tuple:
        raise NotImplementedError

    @classmethod
    def preview(cls, inputs: dict, outputs: tuple) -> dict | None:
        """UI data sent to the frontend with the outputs ({key: [values]}), or None."""
        return None

    @classmethod
    def execute(cls, **inputs):
        check_widgets(cls.INPUTS, inputs)
        outputs = cls.run(**inputs)
        ui = cls.preview(inputs, outputs)
        return {"ui": ui, "result": outputs} if ui else outputs


def check_widgets(specs, inputs: dict) -> None:
    """Every widget value the prompt gives, against its declaration: INT and FLOAT finite numbers within
    min..max (ComfyUI's own check lets NaN through: NaN < min is false), BOOLEAN a bool, STRING a
    string, a fixed COMBO one of its options. ValueError naming the input otherwise."""
    for spec in specs:
        if spec.name in inputs and spec.type in _WIDGET_CHECKS:
            _WIDGET_CHECKS[spec.type](spec, inputs[spec.name])


def _check_number(spec: Input, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{spec.name}: expected a number, got {short(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{spec.name}: expected a finite number in {spec.min:g}..{spec.max:g}, got {value}")
    if spec.type == "INT" and value != int(value):
        raise ValueError(f"{spec.name}: expected a whole number, got {value}")
    if not spec.min <= value <= spec.max:  # exact for integers of any size
        raise ValueError(f"{spec.name}: {short(value)} is outside {spec.min:g}..{spec.max:g}")


def _check_boolean(spec: Input, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{spec.name}: expected true or false, got {short(value)}")


def _check_string(spec: Input, value) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{spec.name}: expected text, got {short(value)}")


def _check_combo(spec: Input, value) -> None:
    if not callable(spec.options) and value not in spec.options:
        raise ValueError(f"{spec.name}: {short(value)} is not one of {', '.join(map(str, spec.options))}")


_WIDGET_CHECKS = {
    "INT": _check_number,
    "FLOAT": _check_number,
    "BOOLEAN": _check_boolean,
    "STRING": _check_string,
    "COMBO": _check_combo,
}


def _v1_entry(spec: Input) -> tuple:
    opts = {"tooltip": spec.tooltip} if spec.tooltip else {}
    if spec.type == "COMBO":
        return (combo_options(spec), {"default": spec.default, **opts})
    if spec.type in ("INT", "FLOAT"):
        opts.update(default=spec.default, min=spec.min, max=spec.max, step=spec.step)
    elif spec.type == "STRING":
        opts.update(default=spec.default, multiline=spec.multiline)
    elif spec.type == "BOOLEAN":
        opts.update(default=spec.default)
    return (spec.type, opts)


def v1_mappings(nodes: list[type[RasterKitNode]]) -> tuple[dict, dict]:
    """NODE_CLASS_MAPPINGS and NODE_DISPLAY_NAME_MAPPINGS for ComfyUI without comfy_api."""
    return {n.NODE_ID: n for n in nodes}, {n.NODE_ID: n.DISPLAY_NAME for n in nodes}


# The socket types comfy_api.latest.io defines (ComfyUI 0.3.64, requires-comfyui in pyproject.toml), by
# the name of their class there; the pack's own types (TRACKS, RASTER, TRIMESH, ...) are io.Custom
CORE_TYPES = {
    "INT": "Int",
    "FLOAT": "Float",
    "STRING": "String",
    "BOOLEAN": "Boolean",
    "COMBO": "Combo",
    "IMAGE": "Image",
    "MASK": "Mask",
    "AUDIO": "Audio",
    "MESH": "Mesh",
    "SVG": "SVG",
    "BBOX": "BBOX",
    "SEGS": "SEGS",
    "LOAD3D_CAMERA": "Load3DCamera",
}


def v3_type(type_name: str, io):
    """The comfy_api ComfyType of a socket type: core's typed class, or io.Custom for the pack's own."""
    return getattr(io, CORE_TYPES[type_name]) if type_name in CORE_TYPES else io.Custom(type_name)


def _v3_input(spec: Input, io):
    common = dict(optional=spec.optional, tooltip=spec.tooltip)
    if spec.type == "INT":
        return io.Int.Input(spec.name, default=spec.default, min=spec.min, max=spec.max, step=spec.step, **common)
    if spec.type == "FLOAT":
        return io.Float.Input(spec.name, default=spec.default, min=spec.min, max=spec.max, step=spec.step, **common)
    if spec.type == "STRING":
        return io.String.Input(spec.name, default=spec.default, multiline=spec.multiline, **common)
    if spec.type == "BOOLEAN":
        return io.Boolean.Input(spec.name, default=spec.default, **common)
    if spec.type == "COMBO":
        return io.Combo.Input(spec.name, options=combo_options(spec), default=spec.default, **common)
    return v3_type(spec.type, io).Input(spec.name, **common)


def to_v3(node: type[RasterKitNode], io):
    """The V3 `io.ComfyNode` class for `node`; `io` is comfy_api.latest.io (passed in so that this
    module imports without ComfyUI)."""

    def define_schema(cls):
        return io.Schema(
            node_id=node.NODE_ID,
            display_name=node.DISPLAY_NAME,
            category=node.CATEGORY,
            description=node.DESCRIPTION,
            inputs=[_v3_input(spec, io) for spec in node.INPUTS],
            outputs=[v3_type(o.type, io).Output(display_name=o.name, tooltip=o.tooltip) for o in node.OUTPUTS],
            is_output_node=node.OUTPUT_NODE,
        )

    def execute(cls, **inputs):
        check_widgets(node.INPUTS, inputs)
        outputs = node.run(**inputs)
        return io.NodeOutput(*outputs, ui=node.preview(inputs, outputs))

    members = {
        "define_schema": classmethod(define_schema),
        "execute": classmethod(execute),
        "__doc__": node.DESCRIPTION,
    }
    if hasattr(node, "IS_CHANGED"):
        members["fingerprint_inputs"] = classmethod(lambda cls, **inputs: node.fingerprint(**inputs))
    return type(node.__name__, (io.ComfyNode,), members)
