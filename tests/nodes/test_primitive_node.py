"""RasterKit_PrimitiveMesh: outputs, SVG agreement with the image, determinism, bad input."""

import io
import math
import re
import sys
import types

import pytest
import torch

from primitive_scenes import scene
from rasterkit.utils import color_optimizer as co

SMALL = dict(candidates=120, mutations=24, working_size=48, output_size=96)


@pytest.fixture(scope="module")
def node(pack):
    return pack.nodes.primitives.PrimitiveMesh


def picture(batch=1, height=30, width=45, channels=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(batch, channels, 4, 6, generator=g)
    smooth = torch.nn.functional.interpolate(coarse, size=(height, width), mode="bilinear", align_corners=False)
    return smooth.permute(0, 2, 3, 1).contiguous()


def parse_svg(text):
    """Shapes of one SVG document as the node writes it: (Approximation in output pixels, H, W)."""
    width, height = (int(v) for v in re.search(r'width="(\d+)" height="(\d+)"', text).groups())
    number = r"(-?[\d.]+)"
    background = re.search(r'<rect x="0" y="0" [^>]*fill="#(\w{6})"(?: fill-opacity="([\d.]+)")?', text)
    background_rgb = [int(background.group(1)[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    if background.group(2) is not None:  # a transparent background: the fit is premultiplied RGBA
        opacity = float(background.group(2))
        background_rgb = [v * opacity for v in background_rgb] + [opacity]
    kinds, params, colours, alphas = [], [], [], []
    for element in text.splitlines()[2:-1]:
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', element))
        paint = attrs["stroke"] if attrs.get("fill", "none") == "none" else attrs["fill"]  # strokes: no fill
        opacity = attrs.get("fill-opacity", attrs.get("stroke-opacity"))
        angle = float(re.search(f"rotate\\({number}", attrs["transform"]).group(1)) if "transform" in attrs else None

        def f(name):
            return float(attrs[name])  # noqa: B023

        if element.startswith("<polygon"):
            points = [float(v) for v in re.findall(number, attrs["points"])]
            kinds.append(co.TRIANGLE if len(points) == 6 else co.POLYGON)
            p = points + [0.0] * (8 - len(points))
        elif element.startswith("<rect") and angle is None:
            kinds.append(co.RECTANGLE)
            p = [f("x"), f("y"), f("x") + f("width"), f("y") + f("height"), 0, 0, 0, 0]
        elif element.startswith("<rect"):
            kinds.append(co.ROTATED_RECTANGLE)
            p = [f("x") + f("width") / 2, f("y") + f("height") / 2, f("width"), f("height"), angle, 0, 0, 0]
        elif element.startswith("<ellipse"):
            kinds.append(co.ELLIPSE if angle is None else co.ROTATED_ELLIPSE)
            p = [f("cx"), f("cy"), f("rx"), f("ry"), angle or 0.0, 0, 0, 0]
        elif element.startswith("<circle"):
            kinds.append(co.CIRCLE)
            p = [f("cx"), f("cy"), f("r"), 0, 0, 0, 0, 0]
        elif element.startswith("<line"):
            kinds.append(co.LINE)
            p = [f("x1"), f("y1"), f("x2"), f("y2"), f("stroke-width"), 0, 0, 0]
        elif element.startswith("<polyline"):
            kinds.append(co.POLYLINE)
            p = [float(v) for v in re.findall(number, attrs["points"])] + [f("stroke-width"), 0.0]
        else:
            d = [float(v) for v in re.findall(number, attrs["d"])]
            kinds.append(co.QUADRATIC)
            p = d + [f("stroke-width"), 0.0]
        params.append(p)
        colours.append([int(paint[i : i + 2], 16) / 255 for i in (1, 3, 5)])
        alphas.append(float(opacity))
    n = len(kinds)
    shapes = co.Approximation(
        torch.tensor([kinds]),
        torch.tensor([params]).view(1, n, 8),
        torch.tensor([colours]).view(1, n, 3),
        torch.tensor([alphas]),
        torch.tensor([n]),
        torch.zeros(1, n + 1),
        torch.tensor([background_rgb]),
        height,
        width,
    )
    return shapes, height, width


def test_outputs_sizes_frames_and_svg(node):
    image, frames, svg, _, _ = node.run(picture(), shapes=12, shape_type="triangle", **SMALL)
    assert image.shape == (1, 64, 96, 3) and image.dtype == torch.float32
    assert frames.shape == (12, 64, 96, 3)  # every shape: 12 <= 60 frames
    assert torch.equal(frames[-1], image[0])
    assert svg.count("<polygon") == 12 and 'viewBox="0 0 96 64"' in svg
    assert float(image.min()) >= 0 and float(image.max()) <= 1


def test_at_most_sixty_frames(node):
    _, frames, _, _, _ = node.run(
        picture(), shapes=130, shape_type="circle", candidates=30, mutations=8, working_size=32, output_size=32
    )
    assert frames.shape[0] == math.ceil(130 / math.ceil(130 / 60)) <= 60


@pytest.mark.parametrize(
    "shape_type", ["combo", "quadratic", "rotated_rectangle", "rotated_ellipse", "line", "polyline"]
)
def test_svg_rerendered_matches_image(node, shape_type):
    image, _, svg, _, _ = node.run(picture(seed=2), shapes=20, shape_type=shape_type, alpha=0, seed=4, **SMALL)
    shapes, height, width = parse_svg(svg)
    assert (height, width) == image.shape[1:3]
    assert int(shapes.count[0]) == 20
    rerendered, _ = co.render(shapes, height, width, 1.0)
    difference = (rerendered - image).abs()
    assert float(difference.mean()) < 2e-3
    assert float(difference.max()) < 0.1


def approximation_from_json(entries, height, width):
    """The shapes of one image's shapes_json list as an Approximation in output pixels."""
    background, *shapes = entries
    assert background["type"] == "rectangle" and background["data"] == [0, 0, width, height]
    n = len(shapes)
    params = torch.zeros(1, n, 8)
    for i, shape in enumerate(shapes):
        assert len(shape["data"]) == co.PARAM_COUNTS[co.KINDS.index(shape["type"])]
        params[0, i, : len(shape["data"])] = torch.tensor(shape["data"])
    colours = torch.tensor([[s["color"] for s in shapes]], dtype=torch.float32).view(1, n, 4) / 255
    return co.Approximation(
        torch.tensor([[co.KINDS.index(s["type"]) for s in shapes]]).view(1, n),
        params,
        colours[..., :3],
        colours[..., 3],
        torch.tensor([n]),
        torch.zeros(1, n + 1),
        torch.tensor([background["color"][:3]], dtype=torch.float32) / 255,
        height,
        width,
    )


@pytest.mark.parametrize("shape_type", ["combo", "line", "polyline"])
def test_shapes_json_rerendered_matches_image(node, shape_type):
    """geometrize's JSON exporter's list: the background rectangle, then every shape with its data in
    output pixels and its colour 0..255; drawn again, it is the image."""
    import json

    image, _, _, _, text = node.run(picture(seed=2), shapes=15, shape_type=shape_type, alpha=0, seed=4, **SMALL)
    entries = json.loads(text)
    assert len(entries) == 16 and all(set(e) == {"type", "data", "color"} for e in entries)
    shapes = approximation_from_json(entries, *image.shape[1:3])
    rerendered, _ = co.render(shapes, *image.shape[1:3], 1.0)
    difference = (rerendered - image).abs()
    assert float(difference.mean()) < 2e-3 and float(difference.max()) < 0.1


def test_shapes_json_of_a_batch_is_one_list_per_image(node):
    import json

    _, _, svg, _, text = node.run(picture(batch=2), shapes=3, **SMALL)
    lists = json.loads(text)
    assert len(lists) == 2 and all(len(entries) == 4 and entries[0]["type"] == "rectangle" for entries in lists)
    assert [e["type"] for e in lists[1][1:]] == ["triangle"] * 3
    assert svg.count("<polygon") == 6


def test_passes_draw_each_pass_over_the_last(node):
    """fogleman/primitive's repeated -n: 'kind:count:alpha' passes, drawn one over the other; the shapes
    and frames count every pass, the SVG and JSON list them in order."""
    import json

    image, frames, svg, _, text = node.run(
        picture(seed=2), shapes=99, passes="triangle:6:200, line+ellipse:4:0", frames=5, seed=1, **SMALL
    )
    kinds = [entry["type"] for entry in json.loads(text)[1:]]
    assert kinds[:6] == ["triangle"] * 6 and set(kinds[6:]) <= {"line", "ellipse"} and len(kinds) == 10
    assert [entry["color"][3] for entry in json.loads(text)[1:7]] == [200] * 6
    assert frames.shape[0] == 5 and torch.equal(frames[-1], image[0])
    assert svg.count("<polygon") == 6
    plain, *_ = node.run(picture(seed=2), shapes=6, shape_type="triangle", alpha=200, seed=1, **SMALL)
    assert not torch.equal(plain, image)  # the second pass drew over the first


def test_edge_weight_and_coarse_change_the_search_and_keep_the_outputs(node):
    """edge_weight and coarse (coarse to fine) change which shapes are found, not what comes out: the
    same outputs, sizes and counts, a picture about as close."""
    target = picture(height=72, width=96, seed=5)
    options = dict(shapes=16, shape_type="triangle", seed=2, candidates=120, mutations=24, working_size=96)
    plain, frames, svg, _, _ = node.run(target, **options, output_size=96)
    errors = {}
    for extra in (dict(edge_weight=1.0), dict(coarse=0.5)):
        image, other_frames, other_svg, _, text = node.run(target, **options, output_size=96, **extra)
        assert image.shape == plain.shape and other_frames.shape == frames.shape
        assert other_svg.count("<polygon") == svg.count("<polygon") == 16 and not torch.equal(image, plain)
        errors[tuple(extra)] = float(((image - target) ** 2).mean())
    base = float(((plain - target) ** 2).mean())
    assert all(error < 1.5 * base for error in errors.values()), (base, errors)


def test_output_is_rendered_at_output_size_not_upscaled(node):
    small, *_ = node.run(picture(), shapes=10, shape_type="ellipse", seed=1, **SMALL)
    large, *_ = node.run(picture(), shapes=10, shape_type="ellipse", seed=1, **{**SMALL, "output_size": 384})
    assert large.shape == (1, 256, 384, 3)
    # anti-aliased edges at full resolution: many more distinct values than a 4x nearest upscale has
    assert torch.unique(large).numel() > 2 * torch.unique(small).numel()
    downscaled = torch.nn.functional.avg_pool2d(large.permute(0, 3, 1, 2), 4).permute(0, 2, 3, 1)
    assert float((downscaled - small).abs().mean()) < 0.01


def test_error_falls_as_shapes_are_added(node):
    target = picture(height=48, width=48)
    errors = []
    for shapes in (5, 20, 60):
        image, *_ = node.run(
            target,
            shapes=shapes,
            shape_type="triangle",
            seed=3,
            candidates=150,
            mutations=30,
            working_size=48,
            output_size=48,
        )
        errors.append(float(((image - target) ** 2).mean()))
    assert errors[0] > errors[1] > errors[2]


def test_deterministic_for_a_seed(node):
    first = node.run(picture(), shapes=8, shape_type="combo", seed=11, **SMALL)
    second = node.run(picture(), shapes=8, shape_type="combo", seed=11, **SMALL)
    other = node.run(picture(), shapes=8, shape_type="combo", seed=12, **SMALL)
    assert torch.equal(first[0], second[0]) and first[2] == second[2]
    assert first[2] != other[2]


def test_batch_gives_one_result_per_image(node):
    images = picture(batch=2)
    image, frames, svg, _, _ = node.run(images, shapes=6, **SMALL)
    assert image.shape[0] == 2 and frames.shape[0] == 12
    assert svg.count("<svg") == 2
    assert not torch.equal(image[0], image[1])


def test_background_hex_and_rgba_input(node):
    rgba = picture(channels=4)
    image, frames, svg, _, _ = node.run(rgba, shapes=4, background="#102030", **SMALL)
    assert image.shape[-1] == 4
    assert 'fill="#102030"' in svg.splitlines()[1]
    assert float(image[..., 3].min()) >= 0


def test_one_pixel_image_gives_a_flat_picture(node):
    pixel = torch.tensor([[[[0.2, 0.6, 0.9]]]])
    image, frames, svg, _, _ = node.run(pixel, shapes=5, **SMALL)
    assert image.shape == (1, 96, 96, 3)
    assert torch.allclose(image, pixel.expand_as(image), atol=0.5 / 255 + 1e-6)  # 8-bit colours


def test_non_finite_pixels_do_not_break_the_search(node):
    broken = picture()
    broken[0, 3:9, 4:12] = float("nan")
    broken[0, 20, 20] = float("inf")
    image, *_ = node.run(broken, shapes=5, **SMALL)
    assert bool(torch.isfinite(image).all())


@pytest.mark.parametrize(
    "inputs, message",
    [  # widget values are checked by execute() (nodes/_schema.py)
        (dict(shapes=0), r"shapes: 0 is outside 1..5000"),
        (dict(alpha=256), r"alpha: 256 is outside 0\.\.255"),
        (dict(alpha=-1), r"alpha: -1 is outside"),
        (dict(background="#12345"), r"background: .*'#12345'"),
        (dict(background="teal"), r"background: .*'teal'"),
        (dict(shape_type="hexagon"), r"shape_type: .*'hexagon'"),
        (dict(shape_kinds="triangle, hexagon"), r"shape_kinds: .*'triangle, hexagon'"),
        (dict(passes="triangle:10, hexagon:5"), r"^passes: expected one of .*'hexagon'"),
        (dict(passes="triangle:10:300"), r"^passes: expected a count 1\.\.5000 and an alpha 0\.\.255"),
        (dict(passes="triangle 10"), r"^passes: expected one of .*'triangle 10'"),
        (dict(edge_weight=11.0), r"edge_weight: 11\.0 is outside 0\.\.10"),
        (dict(coarse=1.5), r"coarse: 1\.5 is outside 0\.\.1"),
        (dict(frames=501), r"frames: 501 is outside 0\.\.500"),
        (dict(working_size=8), r"working_size: 8 is outside"),
        (dict(candidates=float("nan")), r"candidates: .*nan"),
        # issue 29: text inputs have a length limit (a 4M-character prompt was parsed before)
        (
            dict(shape_kinds="triangle, " * 100_000),
            r"^shape_kinds: expected text of at most 256 characters, got 1000000",
        ),
        (dict(background="#" + "f" * 300), r"^background: expected text of at most 256 characters, got 301"),
        (dict(shape_kinds=123), r"^shape_kinds: expected text, got 123"),
    ],
)
def test_bad_input_names_the_input(node, inputs, message):
    with pytest.raises(ValueError, match=message):
        node.execute(image=picture(), **{**dict(shapes=3, **SMALL), **inputs})


@pytest.mark.parametrize(
    "image, message",
    [
        (torch.zeros(1, 0, 5, 3), r"image: .*\(1, 0, 5, 3\)"),
        (torch.zeros(4, 4, 3), r"image: .*\(4, 4, 3\)"),
        ("not an image", r"image: .*str"),
    ],
)
def test_bad_image_names_the_input(node, image, message):
    with pytest.raises(ValueError, match=message):
        node.run(image, shapes=3, **SMALL)


def svg_coverage(element, height, width, factor=8):
    """Coverage [H,W] of an SVG <rect> or <ellipse> with transform="rotate(a cx cy)", by SVG's rules and
    nothing of the engine: a point is inside when turning it by -a about (cx, cy) (SVG's rotate turns
    clockwise on screen, y down) brings it into the untransformed shape. factor x factor samples a pixel."""
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', element))
    a, cx, cy = (
        float(v) for v in re.fullmatch(r"rotate\(([-\d.]+) ([-\d.]+) ([-\d.]+)\)", attrs["transform"]).groups()
    )
    sy, sx = torch.meshgrid(
        (torch.arange(height * factor, dtype=torch.float64) + 0.5) / factor,
        (torch.arange(width * factor, dtype=torch.float64) + 0.5) / factor,
        indexing="ij",
    )
    cos, sin = math.cos(math.radians(a)), math.sin(math.radians(a))
    px = cx + (sx - cx) * cos + (sy - cy) * sin  # rotate(-a): the inverse of SVG's [cos -sin; sin cos]
    py = cy - (sx - cx) * sin + (sy - cy) * cos

    def f(name):
        return float(attrs[name])

    if element.startswith("<rect"):
        inside = (px >= f("x")) & (px <= f("x") + f("width")) & (py >= f("y")) & (py <= f("y") + f("height"))
    else:
        inside = ((px - f("cx")) / f("rx")) ** 2 + ((py - f("cy")) / f("ry")) ** 2 <= 1
    return inside.double().view(height, factor, width, factor).mean((1, 3)).float()


@pytest.mark.parametrize("kind", [co.ROTATED_RECTANGLE, co.ROTATED_ELLIPSE])
def test_svg_rotated_shapes_are_the_ones_rendered(kind):
    """The SVG's <rect>/<ellipse transform="rotate(a cx cy)"> of each rotated shape covers what the image
    shows (opaque shapes apart from each other, rendered at twice the working size)."""
    params = torch.tensor(
        [
            [12.5, 11.0, 16.0, 5.0, 33.0],
            [36.0, 13.0, 4.0, 15.0, -70.0],
            [14.0, 29.0, 18.0, 6.0, 121.0],
            [40.0, 30.0, 12.0, 7.0, 200.0],
        ]
    )
    if kind == co.ROTATED_ELLIPSE:  # radii, not sizes
        params[:, 2:4] /= 2
    colours = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, 1.0, 0]])
    result = co.Approximation(
        torch.full((1, 4), kind),
        torch.cat([params, torch.zeros(4, 3)], 1)[None],
        colours[None],
        torch.ones(1, 4),
        torch.tensor([4]),
        torch.zeros(1, 5),
        torch.zeros(1, 3),
        40,
        56,
    )
    image, _ = co.render(result, 80, 112, 2.0)
    elements = [line for line in co.svg(result, 0, 80, 112, 2.0).splitlines() if "rotate(" in line]
    assert len(elements) == 4
    expected = torch.zeros(80, 112, 3)
    for element, colour in zip(elements, colours, strict=False):
        expected += svg_coverage(element, 80, 112)[..., None] * colour
    error = (image[0] - expected).abs()
    assert float(error.mean()) < 0.01 and float(error.max()) < 0.2


def test_rgba_input_keeps_its_alpha_resized_to_the_output(node):
    """README: RGBA inputs keep their alpha on `image`. The alpha here is linear across the 30 x 45 input,
    so resized to 64 x 96 it is the same linear function at the output's pixel centres (away from the
    border, where resampling clamps); the shapes are searched on the colours alone."""
    rgb = picture()
    y, x = torch.meshgrid(torch.arange(30) + 0.5, torch.arange(45) + 0.5, indexing="ij")
    alpha = 0.6 * x / 45 + 0.3 * y / 30
    image, frames, *_ = node.run(torch.cat([rgb, alpha[None, ..., None]], -1), shapes=6, seed=5, **SMALL)
    assert image.shape == (1, 64, 96, 4) and frames.shape[-1] == 3
    y, x = torch.meshgrid(torch.arange(64) + 0.5, torch.arange(96) + 0.5, indexing="ij")
    expected = 0.6 * x / 96 + 0.3 * y / 64
    assert torch.allclose(image[0, 2:-2, 2:-2, 3], expected[2:-2, 2:-2], atol=1e-5)
    opaque, *_ = node.run(rgb, shapes=6, seed=5, **SMALL)
    assert torch.equal(image[..., :3], opaque)


def test_shape_kinds_mixes_the_kinds_it_names_and_wins_over_shape_type(node):
    _, _, svg, _, _ = node.run(
        scene(),
        shapes=16,
        shape_type="circle",
        shape_kinds="triangle, rectangle",
        alpha=0,
        **{**SMALL, "working_size": 56},
    )
    elements = [line.split(" ")[0] for line in svg.splitlines()[2:-1]]
    assert len(elements) == 16 and set(elements) == {"<polygon", "<rect"}
    _, _, only_circles, _, _ = node.run(picture(seed=3), shapes=4, shape_type="circle", shape_kinds=" ", **SMALL)
    assert only_circles.count("<circle") == 4


@pytest.mark.parametrize("frames, expected", [(5, 4), (12, 12), (60, 12), (1, 1)])
def test_frames_sets_the_number_of_build_up_frames(node, frames, expected):
    image, build_up, _, _, _ = node.run(picture(), shapes=12, frames=frames, **SMALL)
    assert build_up.shape == (expected, 64, 96, 3)  # every ceil(12 / frames)th shape, and the last
    assert torch.equal(build_up[-1], image[0])


def test_no_frames_gives_the_final_image_as_the_build_up(node):
    images = picture(batch=2, channels=4)
    image, build_up, _, _, _ = node.run(images, shapes=5, frames=0, **SMALL)
    assert torch.equal(build_up, image)  # alpha and all


def test_memory_estimate_counts_the_frames_asked_for(node, monkeypatch):
    """8192 x 8192 output pixels, 12 bytes each per frame and 24 more (the picture and its clamped copy);
    the render's work is cut into chunks of what free memory leaves (tests/test_primitive_memory.py)."""
    from rasterkit.nodes import primitives
    from rasterkit.utils.core import device

    monkeypatch.setattr(device, "free_memory_bytes", lambda _device: 4 << 30)
    monkeypatch.setattr(primitives, "free_memory_bytes", lambda _device: 4 << 30)
    square = picture(height=32, width=32)
    with pytest.raises(ValueError, match=r"^output_size 8192 with 100 build-up frames x 1 images needs ~82\.1 GB"):
        node.execute(image=square, shapes=100, output_size=8192, frames=500)
    with pytest.raises(ValueError, match=r"^output_size 8192 with 0 build-up frames x 4 images needs ~6\.4 GB"):
        node.execute(image=square.expand(4, -1, -1, -1), shapes=100, output_size=8192, frames=0)


def test_memory_estimate_of_the_search_names_its_inputs(node, monkeypatch):
    """The search's images and prefix sums at working_size 2048 (~0.5 GB an image) and a part of the torch
    path's row slots (PART_ROWS of them): refused past free memory, before anything is searched."""
    from rasterkit.utils.core import device

    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    monkeypatch.setattr(device, "free_memory_bytes", lambda _device: 1 << 30)
    with pytest.raises(
        ValueError,
        match=r"^working_size 2048 with 1000 candidates and 100 mutations x 2 images needs ~2\.\d GB",
    ):
        node.execute(
            image=picture(batch=2, height=32, width=32),
            shapes=1,
            shape_type="combo",
            working_size=2048,
            frames=0,
        )


def test_svg_documents_output_holds_one_document_per_image(node):
    """Without ComfyUI the SVG output is a stand-in with core ComfyUI's SVG's `.data` (one BytesIO per image)."""
    _, _, text, documents, _ = node.run(picture(batch=2), shapes=3, **SMALL)
    assert type(documents).__name__ == "SVGDocuments"
    assert [entry.getvalue().decode() for entry in documents.data] == text.split("\n\n")


def test_svg_documents_are_core_comfyuis_svg_where_it_runs(node, monkeypatch):
    class SVG:  # comfy_extras/nodes_images.py's, in ComfyUI 0.3.64
        def __init__(self, data: list[io.BytesIO]):
            self.data = data

    extras = types.ModuleType("comfy_extras")
    extras.nodes_images = types.ModuleType("comfy_extras.nodes_images")
    extras.nodes_images.SVG = SVG
    monkeypatch.setitem(sys.modules, "comfy_extras", extras)
    monkeypatch.setitem(sys.modules, "comfy_extras.nodes_images", extras.nodes_images)
    _, _, text, documents, _ = node.run(picture(), shapes=3, **SMALL)
    assert isinstance(documents, SVG) and documents.data[0].getvalue().decode() == text


@pytest.fixture
def progress_bars(monkeypatch):
    """ComfyUI's ProgressBar and interrupt check, recording every update_absolute(value, total, preview)."""
    updates = []

    class ProgressBar:
        def __init__(self, total):
            self.total = total

        def update_absolute(self, value, total=None, preview=None):
            updates.append((value, total, preview))

    utils = types.ModuleType("comfy.utils")
    utils.ProgressBar = ProgressBar
    management = types.ModuleType("comfy.model_management")
    management.throw_exception_if_processing_interrupted = lambda: None
    management.get_torch_device = management.intermediate_device = lambda: torch.device("cpu")
    comfy = types.ModuleType("comfy")
    comfy.utils, comfy.model_management = utils, management
    for name, module in (("comfy", comfy), ("comfy.utils", utils), ("comfy.model_management", management)):
        monkeypatch.setitem(sys.modules, name, module)
    return updates


def test_the_node_shows_the_canvas_while_it_runs(node, progress_bars, monkeypatch):
    """A JPEG preview of the first image's canvas (working size) with the progress, every shape when
    previews may come at any rate."""
    from rasterkit.nodes import _comfy

    monkeypatch.setattr(_comfy.Progress, "PREVIEW_INTERVAL", 0.0)
    node.run(picture(batch=2), shapes=4, **SMALL)
    previews = [preview for _, _, preview in progress_bars if preview is not None]
    assert len(previews) == 4
    kind, frame, max_size = previews[-1]
    assert (kind, frame.size, frame.mode, max_size) == ("JPEG", (48, 32), "RGB", _comfy.Progress.PREVIEW_SIZE)
    assert progress_bars[-1] == (1000, 1000, None)  # the render, after the search


def test_previews_come_at_most_every_interval_and_for_the_last_shape(node, progress_bars, monkeypatch):
    from rasterkit.nodes import _comfy

    monkeypatch.setattr(_comfy.Progress, "PREVIEW_INTERVAL", 3600.0)
    node.run(picture(), shapes=6, **SMALL)
    previews = [index for index, (_, _, preview) in enumerate(progress_bars) if preview is not None]
    assert previews == [0, 5]  # the first shape's, and the last shape's: the live preview ends on the search's result
    values = [value for value, _, _ in progress_bars]
    assert values == sorted(values) and values[-1] == 1000 and len(progress_bars) > 6


def test_the_progress_bar_weighs_search_and_render_by_their_cost(node, progress_bars, monkeypatch):
    """The bar counts thousandths of the run's time: the search's share ends where the render's estimated
    cost begins (a render estimated at hours leaves the search a sliver), and the render then fills it."""
    from rasterkit.nodes import primitives

    monkeypatch.setattr(primitives, "RENDER_SECONDS_PER_PIXEL_SHAPE", 1.0)
    node.run(picture(), shapes=6, **SMALL)
    values = [value for value, _, _ in progress_bars]
    searched = values[5]  # after the last shape
    assert searched < 10 and values[-1] == 1000 and values == sorted(values), values


def test_a_transparent_background_fits_the_transparency_too(node):
    """background #RRGGBBAA with AA < FF: the shapes fit colour and alpha (premultiplied, error over four
    channels, as fogleman/primitive does); image and frames are RGBA (straight alpha), and the SVG, with
    its clear background, draws the same picture."""
    from rasterkit.utils.gpu_rendering import straight_alpha

    y, x = torch.meshgrid(torch.arange(30) + 0.5, torch.arange(45) + 0.5, indexing="ij")
    disc = (((x - 22) ** 2 + (y - 15) ** 2) < 120).float()
    cut_out = torch.cat([picture(), disc[None, ..., None]], -1)
    image, frames, svg, _, _ = node.run(
        cut_out, shapes=30, background="#ffffff00", alpha=0, seed=1, shape_kinds="ellipse, triangle", frames=6, **SMALL
    )
    assert image.shape == (1, 64, 96, 4) and frames.shape == (6, 64, 96, 4)
    assert torch.equal(frames[-1], image[0])
    assert 'fill-opacity="0"/>' in svg.splitlines()[1]
    coverage = torch.nn.functional.interpolate(image[None, ..., 3], size=(30, 45), mode="area")[0, 0]
    assert float((coverage - disc).abs().mean()) < 0.2 * float(disc.mean())
    assert float(image[0, :4, :4, 3].max()) < 0.1  # the corners stay clear
    shapes, height, width = parse_svg(svg)
    rerendered, _ = co.render(shapes, height, width, 1.0)
    difference = (straight_alpha(rerendered)[..., 3] - image[..., 3]).abs()
    assert float(difference.mean()) < 2e-3
    premultiplied = (rerendered[..., :3] - image[..., :3] * image[..., 3:]).abs()
    assert float(premultiplied.mean()) < 2e-3


def test_an_opaque_image_on_a_transparent_background_is_fitted_opaque(node):
    image, _, _, _, _ = node.run(picture(), shapes=12, background="#00000000", **SMALL)
    assert image.shape == (1, 64, 96, 4)
    assert float(image[..., 3].mean()) > 0.3  # shapes of opacity 128 piled up where the picture is
