"""Bad input on every node, as a hostile or careless user sends it through the API: each call either
works or raises a ValueError whose message starts with the name of an input of that node. Never
another exception type (a traceback from deep inside torch), never a hang."""

import math
import random
import re

import pytest
import torch

from node_inputs import tiny_inputs
from rasterkit.nodes import NODE_CLASSES
from rasterkit.nodes.mesh import Mesh

NUMBERS = [spec for node in NODE_CLASSES for spec in node.INPUTS if spec.type in ("INT", "FLOAT")]
HOSTILE_TEXT = [
    "",
    " ",
    "[",
    "]",
    "{",
    "null",
    "[null]",
    "true",
    "0",
    "-1",
    "[]",
    "[[]]",
    "[[], []]",
    "{}",
    '"text"',
    "[" * 100_000 + "]" * 100_000,  # deeper than Python's recursion limit
    "[" + "9" * 5000 + "]",  # past Python's integer digit limit
    "[[0, 0, " + "9" * 400 + ", 10]]",
    "[1e308, -1e308]",
    "[[1e309, 0, 5, 5]]",
    "[NaN, Infinity]",
    "[[NaN, 0, 5, 5]]",
    "[[0, 0, 5, 5]]",
    "[[-1e308, -1e308, 1e308, 1e308]]",
    "[[40, 40, 80, 80]]",
    '[{"x": 1}]',
    '[{"x": 1, "y": 2}]',
    "[{'x': 1, 'y': 2}]",
    "[[{'x': 3, 'y': 4}], [[5, 6]]]",
    '[["a", "b", "c", "d"]]',
    '[{"x1": 0, "y1": 0, "x2": 9, "y2": 9, "label": "é ж 字 🙂", "color": "#zzz"}]',
    '[{"x": 0, "y": 0, "w": -5, "h": 1e400}]',
    '["[[1, 2]]", "nope"]',
    '[[1, 2, 3], "x"]',
    "[[1, 2], [3]]",
    "1,2,3\n4,x,6",
    "a,b\n1,2\n",
    "1e999,2",
    ",,,\n,,,",
    "\x00\x01\x02",
    "#FF0000",
    "#FF000080",
    "rainbow",
    "[" + "1," * 1000 + "1]",
    "x" * 4_000_001,
]
SOCKETS = {
    "IMAGE": [
        torch.rand(2, 24, 32, 3),
        torch.rand(1, 24, 32, 4),
        torch.full((2, 24, 32, 3), math.nan),
        torch.zeros(0, 24, 32, 3),
        torch.rand(2, 24, 32),
        torch.rand(3, 1, 1, 3),
        "not an image",
    ],
    "MASK": [
        torch.zeros(2, 24, 32),
        torch.ones(3, 24, 32),
        torch.full((24, 32), math.nan),
        torch.zeros(0, 4, 4),
        torch.rand(5, 7),
    ],
    "MESH": [
        Mesh(torch.rand(1, 3, 3), torch.tensor([[[0.0, 1.5, 2.0]]])),  # float indices with a fraction
        Mesh(torch.tensor([[[0.0, 0, 0], [1, 0, 0], [3e38, 1, 0]]]), torch.tensor([[[0, 1, 2]]])),
        Mesh(torch.rand(1, 3, 3), torch.tensor([[[True, False, True]]])),
        Mesh("v", "f"),
        "junk",
        None,
        42,
    ],
    "RASTER": [
        {"view": torch.full((2, 4, 4), math.nan), "projection": torch.eye(4)},
        {"view": torch.eye(4)[None], "projection": "perspective"},
        {"view": torch.eye(4)[None], "projection": torch.eye(4), "view_weights": torch.tensor([-1.0])},
        {"view": torch.eye(4)[None], "projection": torch.eye(4), "view_weights": torch.tensor([math.nan])},
        {},
        "junk",
        None,
    ],
    "TRACKS": [
        {"track_path": torch.full((2, 3, 2), math.nan), "track_visibility": torch.ones(2, 3, dtype=torch.bool)},
        {"track_path": torch.tensor([[[math.inf, -math.inf]]]), "track_visibility": torch.ones(1, 1)},
        {"track_path": torch.zeros(5, 0, 2)},
        {"track_path": torch.zeros(0, 2, 2)},
        {"track_path": "junk"},
        {"track_visibility": torch.ones(2, 2)},
        [[1e308, -1e308]],
        "junk",
        None,
    ],
    "LOAD3D_CAMERA": [
        {"position": {"x": 0, "y": 0, "z": 1e30}, "target": {"x": 0, "y": 0, "z": 0}},
        {"position": {"x": math.nan, "y": 0, "z": 1}, "target": {"x": 0, "y": 0, "z": 0}},
        "junk",
        42,
    ],
}


def allowed_error(node, error: BaseException) -> bool:
    names = {spec.name for spec in node.INPUTS}
    return isinstance(error, ValueError) and str(error).split(":")[0].strip() in names


@pytest.mark.parametrize("spec", NUMBERS, ids=lambda s: s.name)
@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, -math.inf, "3", None, True, 10**400],
    ids=["nan", "inf", "-inf", "text", "none", "bool", "huge"],
)
def test_widget_values_that_are_not_finite_numbers_are_named(spec, value):
    node = next(n for n in NODE_CLASSES if spec in n.INPUTS)
    inputs = {**tiny_inputs(node), spec.name: value}
    with pytest.raises(ValueError, match=f"^{spec.name}: "):
        node.execute(**inputs)


@pytest.mark.parametrize("spec", NUMBERS, ids=lambda s: s.name)
def test_widget_values_outside_their_range_are_named(spec):
    node = next(n for n in NODE_CLASSES if spec in n.INPUTS)
    for value in (spec.min - 1, spec.max + 1):
        with pytest.raises(ValueError, match=f"^{spec.name}: .* is outside"):
            node.execute(**{**tiny_inputs(node), spec.name: value})


def random_value(spec, tiny, rng: random.Random):
    if spec.type == "STRING":
        return rng.choice(HOSTILE_TEXT + [spec.default])
    if spec.type == "COMBO":
        options = spec.options() if callable(spec.options) else spec.options
        return rng.choice(list(options) + ["bogus", "../../etc/passwd.obj"])
    if spec.type == "BOOLEAN":
        return rng.choice([True, False])
    if spec.type in ("INT", "FLOAT"):
        # in range but no heavier than the tiny call: the maxima are heavy by design (the memory estimates
        # refuse what does not fit; tests/test_memory_budget.py)
        value = rng.choice([spec.min, tiny, rng.uniform(spec.min, tiny)])
        return int(value) if spec.type == "INT" else float(value)
    return rng.choice(SOCKETS.get(spec.type, [None, "junk", 42]))


@pytest.mark.parametrize("node", NODE_CLASSES, ids=lambda n: n.NODE_ID)
def test_fuzz(node):
    """60 random malformed calls per node, seeded: each works or names an input."""
    rng = random.Random(node.NODE_ID)
    failures = []
    for case in range(60):
        inputs = tiny_inputs(node)
        for spec in rng.sample(node.INPUTS, k=min(len(node.INPUTS), rng.randint(1, 3))):
            inputs[spec.name] = random_value(spec, inputs.get(spec.name, spec.default), rng)
        try:
            node.execute(**inputs)
        except Exception as error:  # noqa: BLE001 - the point is to see every type
            if not allowed_error(node, error):
                shown = {
                    k: (v if not isinstance(v, str) else v[:60])
                    if not isinstance(v, torch.Tensor)
                    else f"tensor{tuple(v.shape)}"
                    for k, v in inputs.items()
                }
                failures.append(f"case {case}: {type(error).__name__}: {str(error)[:200]} with {shown}")
    assert not failures, "\n".join(failures)


def test_json_nested_too_deeply_or_with_huge_numbers_is_named():
    from rasterkit.nodes.boxes import BoundingBoxRenderer
    from rasterkit.nodes.links import LineLinkRenderer
    from rasterkit.nodes.series import SeriesToImages

    images = torch.rand(1, 16, 16, 3)
    with pytest.raises(ValueError, match="^boxes: nested too deeply"):
        BoundingBoxRenderer.execute(images=images, boxes="[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="^tracks_json: not readable: .*digits"):
        LineLinkRenderer.execute(images=images, tracks_json="[[" + "7" * 5000 + ", 1]]")
    with pytest.raises(ValueError, match="^series: 4,000,001 characters; at most 4,000,000"):
        SeriesToImages.execute(series="[" + " " * 3_999_999 + "]")


def test_huge_coordinates_are_clipped_not_dropped():
    """A box from -1e308 to 1e308 (finite in JSON, infinite in float32) covers the whole frame, and a
    track point at 1e400 (an integer) is far right, not an error."""
    from rasterkit.nodes.boxes import BoundingBoxRenderer
    from rasterkit.utils.inputs.tracks import from_json

    image, alpha, _layer = BoundingBoxRenderer.execute(
        images=torch.zeros(1, 16, 16, 3), fill_opacity=0.5, boxes="[[-1e308, -1e308, 1e308, 1e308]]", labels="none"
    )
    assert torch.allclose(alpha, torch.full_like(alpha, 0.5))
    xy, visible = from_json("[[[" + "1" + "0" * 400 + ", 5]]]", 1)
    assert xy[0, 0].tolist() == [1e6, 5.0] and visible.all()


def test_oriented_boxes_at_extreme_angles_and_sizes_draw_or_name_the_input():
    """Angles are taken modulo a turn (integers of any size exactly), huge sizes are clipped like any
    coordinate; non-finite angles and corners that are not a rectangle's are named."""
    from rasterkit.nodes.boxes import BoundingBoxRenderer

    def run(box):
        return BoundingBoxRenderer.execute(
            images=torch.zeros(1, 16, 16, 3), boxes=f"[{box}]", labels="none", fill_opacity=0.5
        )[1]

    box = '{"x1": 3, "y1": 6, "x2": 13, "y2": 10, "angle": %s}'
    assert torch.allclose(run(box % (360 * 10**40 + 30)), run(box % 30), atol=1e-6)
    assert torch.allclose(run(box % -690), run(box % 30), atol=1e-6)
    assert torch.isfinite(run(box % "1e308")).all() and run(box % "1e308").sum() > 0
    assert torch.allclose(run('{"xywhr": [8, 8, 1e308, 1e308, 0.7]}'), torch.full((1, 16, 16), 0.5))
    assert torch.allclose(
        run('{"points": [[-1e308, -1e308], [1e308, -1e308], [1e308, 1e308], [-1e308, 1e308]]}'),
        torch.full((1, 16, 16), 0.5),
    )
    for bad in (
        box % "NaN",
        box % "Infinity",
        '{"xywhr": [8, 8, 4, 2, -Infinity]}',
        '{"points": [[0, 0], [9, 0]]}',
        '{"points": [[0, 0], [9, 0], [9, 5], [1, 9]]}',
        '{"points": null}',
        '{"xywhr": "8 8 4 2 0"}',
    ):
        with pytest.raises(ValueError, match="^boxes: box 0 "):
            run(bad)


def test_empty_series_is_a_blank_image():
    from rasterkit.nodes.series import SeriesToImages

    images, alpha = SeriesToImages.execute(series="[]", background="#102030")
    assert images.shape == (1, 224, 224, 3) and alpha.shape == (1, 224, 224) and alpha.max() == 0
    assert torch.allclose(images, torch.tensor([0x10, 0x20, 0x30]) / 255.0)


def test_primitive_outputs_that_cannot_fit_are_refused_before_the_search(monkeypatch):
    from rasterkit.nodes.primitives import PrimitiveMesh
    from rasterkit.utils.core import device

    monkeypatch.setattr(device, "free_memory_bytes", lambda _device: 23 << 30)
    with pytest.raises(
        ValueError,
        match=r"^output_size 8192 with 50 build-up frames x 1 images needs ~41\.9 GB; "
        r"this machine has 24.7 GB free",
    ):
        PrimitiveMesh.execute(image=torch.rand(1, 32, 32, 3), shapes=100, output_size=8192)


def test_out_of_memory_is_recognised_on_every_backend():
    from rasterkit.utils.core.device import is_out_of_memory

    assert is_out_of_memory(
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't "
            "allocate memory: you tried to allocate 145000000000 bytes."
        )
    )
    assert is_out_of_memory(RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"))
    assert is_out_of_memory(RuntimeError("HIP out of memory. Tried to allocate 2.00 GiB"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))


def test_work_past_the_bounds_of_one_call_is_refused_or_reduced():
    from rasterkit.nodes.boxes import BoundingBoxRenderer
    from rasterkit.nodes.series import SeriesToImages
    from rasterkit.utils.inputs.audio import from_audio
    from rasterkit.utils.inputs.series import MAX_SERIES_VALUES

    with pytest.raises(ValueError, match="^boxes: 10,001 boxes in frame 0; at most 10,000 per frame"):
        BoundingBoxRenderer.execute(images=torch.rand(1, 8, 8, 3), boxes=str([[0, 0, 1, 1]] * 10_001))
    with pytest.raises(ValueError, match="^boxes: 201,000 boxes over 201 frames; at most 200,000 per run"):
        BoundingBoxRenderer.execute(images=torch.rand(201, 8, 8, 3), boxes=str([[0, 0, 1, 1]] * 1000))
    with pytest.raises(ValueError, match="^series: series 1 has 65,537 values; at most 65,536"):
        SeriesToImages.execute(series=str([[1, 2], [0.5] * 65_537]))
    clip = torch.sin(torch.arange(4 * 100_000.0))[None, None]
    envelope = from_audio({"waveform": clip, "sample_rate": 44100}, frames=2)
    assert envelope.values.shape == (2, MAX_SERIES_VALUES) and envelope.lengths.tolist() == [MAX_SERIES_VALUES] * 2
    assert envelope.values.amax() == clip.amax() and envelope.values.amin() == clip.amin()


# -- issue 29: text limits, MASK sizes, values past float32, sub-pixel bars --------------------------


def test_texts_past_their_limits_are_named_before_they_are_drawn():
    from rasterkit.nodes.boxes import BoundingBoxRenderer
    from rasterkit.nodes.links import LineLinkRenderer
    from rasterkit.nodes.series import SeriesToImages
    from rasterkit.utils.gpu_rendering.labels import label_primitives

    images = torch.rand(1, 64, 64, 3)
    newlines = '[{"x1": 0, "y1": 0, "x2": 9, "y2": 9, "label": "' + "\\n" * 15_000 + 'x"}]'  # was +2.2 GB
    with pytest.raises(ValueError, match=r"^boxes: box 0 \(frame 0\) has a label of 15,001 characters"):
        BoundingBoxRenderer.execute(images=images, boxes=newlines)
    with pytest.raises(ValueError, match="^boxes: 1,000,014 characters; at most 1,000,000"):
        BoundingBoxRenderer.execute(images=images, boxes="[[0, 0, 9, 9]" + " " * 1_000_000 + "]")
    with pytest.raises(ValueError, match="^palette_colors: 4,200 characters; at most 4,096"):
        BoundingBoxRenderer.execute(images=images, palette_colors="#FF0000," * 525)
    with pytest.raises(ValueError, match="^colors: 4,200 characters; at most 4,096"):
        SeriesToImages.execute(series="[[1, 2], [2, 1]]", overlay=True, colors="#FF0000," * 525)
    with pytest.raises(ValueError, match="^tracks_json: track 0 point 0 label has 2,000 characters"):
        LineLinkRenderer.execute(images=images, tracks_json='[[{"x": 1, "y": 2, "label": "' + "a" * 2000 + '"}]]')
    with pytest.raises(ValueError, match="^labels: label 0 has 1,000,001 characters"):  # was Pillow's error
        label_primitives(
            torch.zeros(1, dtype=torch.long),
            torch.tensor([[0.0, 0, 9, 9]]),
            ["x" * 1_000_001],
            torch.ones(1, 4),
            64,
            64,
            16,
        )


def test_label_lines_below_the_frame_are_not_rendered():
    from rasterkit.utils.gpu_rendering.labels import label_primitives

    _prims, atlas = label_primitives(
        torch.zeros(1, dtype=torch.long), torch.tensor([[0.0, 0, 9, 9]]), ["a\n" * 400], torch.ones(1, 4), 64, 64, 16
    )
    assert atlas.shape[0] < 200  # lines that fit 64 px and one more, not 400 lines' height


def test_mask_of_another_size_than_the_images_is_refused():
    from rasterkit.nodes.boxes import BoundingBoxRenderer

    mask = torch.zeros(1, 8, 8)
    mask[0, 2:4, 2:4] = 1
    with pytest.raises(
        ValueError, match=r"^mask: expected a MASK of the images' size \[B,64,64\], got shape \(1, 8, 8\)"
    ):
        BoundingBoxRenderer.execute(images=torch.rand(1, 64, 64, 3), mask=mask)
    BoundingBoxRenderer.execute(images=torch.rand(1, 8, 8, 3), mask=mask)  # its own size: drawn


@pytest.mark.parametrize("big", ["1e308", "1e39", "-1e308", "9" * 400])
def test_series_values_past_float32_are_clipped_not_blank_or_gaps(big):
    from rasterkit.nodes.series import SeriesToImages
    from rasterkit.utils.core.batching import pack
    from rasterkit.utils.gpu_rendering.series import render_series

    _images, alpha = SeriesToImages.execute(series=f"[1, {big}, 3]", width=32, height=32)
    assert (alpha[0].amax(0) > 0).all()  # every column drawn: no blank image, no gap
    _images, alpha = render_series(pack([[1.0, 3e38, -3e38, 3.0]]), 32, 32)  # the engine, float32 values
    assert (alpha[0].amax(0) > 0).all()


@pytest.mark.parametrize("mode", ["antialiased", "aliased"])
def test_bars_narrower_than_a_pixel_are_a_filled_area(mode):
    from rasterkit.nodes.series import SeriesToImages

    values = torch.linspace(0, 1, 65_536)
    _images, alpha = SeriesToImages.execute(series=str(values.tolist()), width=64, height=64, style="bars", mode=mode)
    # the area under a rising line: half the plot, each column up to its highest bar
    assert 0.4 < float(alpha.mean()) < 0.6 and float(alpha[0, :, -1].mean()) > 0.95
    _images, alpha = SeriesToImages.execute(series="[1, 3, 2]", width=64, height=64, style="bars", mode=mode)
    assert alpha[0, :, 0].max() == 0  # wide bars keep their gaps


@pytest.mark.parametrize("mesh_file", [123, None, True, {"__value__": ["rasterkit_torus.obj"]}])
def test_a_mesh_file_that_is_not_text_is_named(mesh_file):
    from rasterkit.nodes.mesh import LoadMesh

    with pytest.raises(ValueError, match="^mesh_file: expected a file name \\(text\\), got "):
        LoadMesh.execute(mesh_file=mesh_file)


def test_mesh_inputs_are_named_through_the_nodes_and_the_engines():
    """The direct calls of issue 29 (each raised IndexError, AttributeError or TypeError, or named the
    wrong input) through the node and through the engine function it calls."""
    from rasterkit.nodes.bake import BakeTexture
    from rasterkit.nodes.mesh import MeshRasterizer
    from rasterkit.utils.mesh_rasterizer import bake as mesh_bake
    from rasterkit.utils.mesh_rasterizer import shading as mesh_shading

    mesh = Mesh(torch.tensor([[[-0.5, -0.5, 0.0], [0.5, -0.5, 0], [0, 0.5, 0]]]), torch.tensor([[[0, 1, 2]]]))
    mesh.uvs = torch.tensor([[[0.0, 0.0], [1, 0], [0.5, 1]]])
    images, normals = torch.rand(1, 16, 16, 3), torch.zeros(1, 4, 4, 3)
    raster = MeshRasterizer.execute(mesh=mesh, width=16, height=16)[5]
    node_cases = [
        (
            lambda: MeshRasterizer.execute(
                mesh=mesh, width=16, height=16, shading="matcap", matcap=torch.zeros(0, 8, 8, 3)
            ),
            "matcap: expected an IMAGE",
        ),
        (
            lambda: BakeTexture.execute(
                mesh=mesh, images=images, raster={**raster, "projection": "perspective"}, texture_size=8
            ),
            "raster: projection: expected a tensor",
        ),
        (
            lambda: BakeTexture.execute(
                mesh=mesh, images=images, raster={**raster, "view": raster["view"] * math.nan}, texture_size=8
            ),
            "raster: view: the camera matrices contain NaN",
        ),
        (
            lambda: MeshRasterizer.execute(mesh=mesh, width=16, height=16, views="list", view_list="0,0;" * 5000),
            "view_list: more than 4,096 views",
        ),
    ]
    position, normal, mask = mesh_bake.uv_maps(
        mesh.vertices[0], mesh.vertices[0], mesh.uvs[0], mesh.faces[0], mesh.faces[0], 8
    )
    engine_cases = [
        (lambda: mesh_shading.matcap(normals, torch.zeros(0, 8, 3), normals[..., 0] > 0), "matcap: expected an image"),
        (lambda: mesh_bake.dilate(position, "mask", 2), "mask: expected a tensor"),
        (
            lambda: mesh_bake.bake(
                images, raster["view"], "perspective", mesh.vertices[0], mesh.faces[0], position, normal, mask
            ),
            "projection: expected a tensor",
        ),
        (
            lambda: mesh_bake.bake(
                images,
                raster["view"] * math.nan,
                raster["projection"],
                mesh.vertices[0],
                mesh.faces[0],
                position,
                normal,
                mask,
            ),
            "view: the camera matrices contain NaN",
        ),
        (
            lambda: mesh_bake.bake(
                images,
                raster["view"],
                raster["projection"],
                mesh.vertices[0],
                mesh.faces[0],
                position,
                normal,
                mask,
                torch.tensor([math.nan]),
            ),
            "view_weights: view 0 has weight",
        ),
    ]
    for call, message in node_cases + engine_cases:
        with pytest.raises(ValueError, match="^" + re.escape(message)):
            call()
