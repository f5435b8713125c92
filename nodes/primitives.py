"""RasterKit_PrimitiveMesh: rebuild images from geometric primitives (fogleman/primitive's method,
with the candidate search batched), as a picture, a build-up animation and SVG."""

from __future__ import annotations

import io
import json
import math
import time

import torch

from ..utils import color_optimizer as engine
from ..utils.core.device import MEMORY_FRACTION, check_memory, free_memory_bytes
from ..utils.gpu_rendering import straight_alpha
from ..utils.inputs.colors import parse_hex
from ._comfy import Progress, animation_preview, check_interrupt, comfy_module, intermediate_device, render_device
from ._schema import Combo, Float, Int, Output, RasterKitNode, Socket, String
from ._validate import check_images

MAX_FRAMES = 500
MAX_TEXT = engine.MAX_KINDS_TEXT  # the longest text input (shape_kinds; a colour is far shorter)
# Render time on the CPU, measured (30 triangles at 1024 px, 2 cores): 63 ns per output pixel and shape composited,
# and a build-up frame costs as much as 2.5 shapes (7.1 s with 30 frames, 2.0 s without); the progress bar weighs
# the render by it until the render measures its own pace. On a GPU the render is one kernel, milliseconds: no weight.
RENDER_SECONDS_PER_PIXEL_SHAPE = 63e-9
RENDER_FRAME_SHAPES = 2.5


class PrimitiveMesh(RasterKitNode):
    NODE_ID = "RasterKit_PrimitiveMesh"
    DISPLAY_NAME = "Primitive Mesh (RasterKit)"
    CATEGORY = "RasterKit/stylize"
    DESCRIPTION = (
        "Approximates each image with geometric shapes added one at a time, each the best of a batched "
        "search (random candidates, then hill climbing, colour solved in closed form). Outputs the "
        "picture re-rendered anti-aliased at output_size, the build-up frames, and SVG; shows the picture "
        "growing on the node while it runs."
    )
    INPUTS = [
        Socket("image", "IMAGE", tooltip="each image of the batch is approximated on its own"),
        Int("shapes", 100, 1, 5000, tooltip="number of shapes per image"),
        Combo(
            "shape_type",
            (*engine.KINDS, "combo"),
            tooltip="quadratic: stroked Bezier curves; polygon: 4 vertices; line: straight strokes; polyline: two "
            "straight strokes joined (mitred); combo: fogleman/primitive's eight (triangle to polygon)",
        ),
        Int("alpha", 128, 0, 255, tooltip="opacity of every shape (1..255); 0 searches it per shape"),
        Int("candidates", 1000, 1, 100000, tooltip="random shapes tried per shape before hill climbing"),
        Int(
            "mutations",
            100,
            1,
            10000,
            tooltip="hill climbing tries this many mutations per round and stops when none of them improves",
        ),
        Int("working_size", 256, 16, 2048, tooltip="longer side of the image the search works on"),
        Int("output_size", 1024, 16, 8192, tooltip="longer side of the outputs, re-rendered (not upscaled)"),
        Int("seed", 0, 0, 0xFFFFFFFFFFFFFFFF, tooltip="the same seed and inputs give the same shapes"),
        String(
            "background",
            "auto",
            tooltip="'auto' (the image's mean colour) or a hex colour like #RRGGBB; "
            "#RRGGBBAA with AA below FF fits the transparency too (RGBA outputs)",
        ),
        String(
            "shape_kinds",
            "",
            tooltip="several kinds to mix, separated by commas (e.g. 'triangle, ellipse'); empty: shape_type alone",
        ),
        Int(
            "frames",
            60,
            0,
            MAX_FRAMES,
            tooltip="build-up frames per image at most (one every nth shape); 0: none, "
            "the frames output is the final image",
        ),
        String(
            "passes",
            "",
            optional=True,
            tooltip="several passes, each over the last (fogleman/primitive's repeated -n): "
            "'kind:count:alpha' separated by commas, e.g. 'triangle:100:128, ellipse:50:64' (kinds of one "
            "pass joined by '+'; count and alpha optional: shapes and alpha); empty: one pass of "
            "shape_type/shape_kinds",
        ),
        Float(
            "edge_weight",
            0.0,
            0.0,
            10.0,
            step=0.1,
            optional=True,
            tooltip="weight of the error at the image's edges (Sobel): 0 off; 1 counts an edge pixel twice, so "
            "shapes follow edges and detail comes out sharper, for a little more error elsewhere",
        ),
        Float(
            "coarse",
            0.0,
            0.0,
            1.0,
            step=0.05,
            optional=True,
            tooltip="coarse to fine: this share of each pass's shapes (the first, large ones) is searched at half "
            "the working size, the rest at full size over them; faster. 0: off",
        ),
    ]
    OUTPUTS = [
        Output(
            "IMAGE",
            "image",
            tooltip="the shapes, anti-aliased, at output_size (RGBA: with the input's alpha, "
            "or fitted with a transparent background)",
        ),
        Output(
            "IMAGE", "frames", tooltip="build-up frames every nth shape (at most `frames` per image), image after image"
        ),
        Output(
            "STRING", "svg", tooltip="one SVG document per image (viewBox in output pixels), separated by a blank line"
        ),
        Output("SVG", "svg_documents", tooltip="the same SVG documents as core ComfyUI's SVG type (for Save SVG)"),
        Output(
            "STRING",
            "shapes_json",
            tooltip="the shapes as geometrize's JSON exporter lists them (plotters, games): the background "
            "rectangle, then {type, data (output pixels), color [r,g,b,a] 0..255} per shape; a batch gives "
            "one list per image",
        ),
    ]

    @classmethod
    def run(
        cls,
        image,
        shapes=100,
        shape_type="triangle",
        alpha=128,
        candidates=1000,
        mutations=100,
        working_size=256,
        output_size=1024,
        seed=0,
        background="auto",
        shape_kinds="",
        frames=60,
        passes="",
        edge_weight=0.0,
        coarse=0.0,
    ):
        check_images(image, "image")
        kinds = _kinds(shape_type, shape_kinds, background)
        runs = engine.parse_passes(passes, shapes, alpha) or [(kinds, shapes, alpha)]
        shapes = sum(count for _, count, _ in runs)
        device = render_device()
        batch, height, width, channels = image.shape
        # non-finite pixels (a broken upstream node) count as black rather than poisoning every sum
        pixels = torch.nan_to_num(image.to(device, torch.float32), nan=0.0, posinf=1.0, neginf=0.0).clamp(0, 1)
        work_h, work_w = _fit(height, width, working_size)
        target, fill, transparent = _target(pixels, background, work_h, work_w)
        out_h, out_w = _fit(work_h, work_w, output_size)
        every = math.ceil(shapes / frames) if frames else 0
        frame_count = math.ceil(shapes / every) if frames else 0
        search = max(
            engine.search_memory(batch, work_h, work_w, target.shape[-1], k, a, candidates, mutations, device)
            for k, _, a in runs
        )
        check_memory(
            search,
            f"working_size {working_size} with {candidates} candidates and {mutations} mutations x {batch} images",
            device,
        )
        render = engine.render_memory(
            batch, shapes, out_h, out_w, 4 if transparent else 3, every, free_memory_bytes(device) * MEMORY_FRACTION
        )
        if transparent or channels == 4:  # straight alpha, or the input's alpha joined: a copy of the outputs
            render += batch * out_h * out_w * 4 * 4 * (frame_count + 1)
        check_memory(render, f"output_size {output_size} with {frame_count} build-up frames x {batch} images", device)
        generator = torch.Generator(device=device).manual_seed(int(seed))
        render_cost = (
            batch * out_h * out_w * (shapes + RENDER_FRAME_SHAPES * frame_count) if device.type == "cpu" else 0
        )
        bar = _SearchThenRender(shapes, render_cost)
        # the node shows the first image's canvas as it grows (the last shape's always); it is read only when
        # a preview is due
        result = engine.approximate_passes(
            target,
            runs,
            candidates=candidates,
            mutations=mutations,
            background=fill,
            generator=generator,
            on_shape=lambda done, _, canvas: bar.searched(
                done, canvas[0] if bar.progress.preview_due() or done == shapes else None
            ),
            on_round=check_interrupt,  # a shape at large `mutations` takes minutes
            edge_weight=float(edge_weight),
            coarse=float(coarse),
        )
        scale = output_size / max(work_h, work_w)
        picture, build_up = engine.render(result, out_h, out_w, scale, frame_every=every, on_chunk=bar.rendered)
        build_up = None if build_up is None else build_up.reshape(-1, out_h, out_w, picture.shape[-1])
        if transparent:
            picture = straight_alpha(picture)
            build_up = None if build_up is None else straight_alpha(build_up)
        elif channels == 4:  # the input's alpha, resized, so that a cut-out stays cut out
            picture = torch.cat([picture, _resize(pixels[..., 3:], out_h, out_w)], -1)
        build_up = picture if build_up is None else build_up  # frames = 0: the final image, alpha and all
        documents = [engine.svg(result, b, out_h, out_w, scale) for b in range(batch)]
        lists = [engine.shape_list(result, b, out_h, out_w, scale) for b in range(batch)]
        out = intermediate_device()
        return (
            picture.to(out),
            build_up.to(out),
            "\n\n".join(documents),
            svg_documents(documents),
            json.dumps(lists[0] if batch == 1 else lists, separators=(",", ":")),
        )

    @classmethod
    def preview(cls, inputs, outputs):
        return animation_preview(outputs[1])  # the build-up, played in the node


class _SearchThenRender:
    """One progress bar over the search and the render, each weighted by its cost in seconds as measured
    while it runs (seconds so far per shape searched or rendered, times the shapes left); until the render
    starts its cost is estimated from its size (pixel-shapes, RENDER_SECONDS_PER_PIXEL_SHAPE). The bar
    never goes back; it counts thousandths."""

    def __init__(self, shapes: int, render_pixel_shapes: float):
        self.shapes = max(1, shapes)
        self.render_estimate = render_pixel_shapes * RENDER_SECONDS_PER_PIXEL_SHAPE
        self.search_seconds = 0.0
        self.start = time.monotonic()
        self.shown = 0
        self.progress = Progress(1000)

    def _show(self, fraction: float, preview: torch.Tensor | None = None) -> None:
        self.shown = max(self.shown, min(1000, round(1000 * fraction)))
        self.progress(self.shown, preview=preview)

    def searched(self, done: int, preview: torch.Tensor | None) -> None:
        self.search_seconds = time.monotonic() - self.start
        self._show(
            self.search_seconds / (self.search_seconds * self.shapes / max(1, done) + self.render_estimate), preview
        )

    def rendered(self, done: int, total: int) -> None:
        spent = time.monotonic() - self.start - self.search_seconds  # the render starts as the search ends
        left = spent * (total - done) / max(1, done)
        self._show((self.search_seconds + spent) / (self.search_seconds + spent + left))


class SVGDocuments:
    """What the SVG output holds outside ComfyUI: the same `.data` as core ComfyUI's SVG type (one
    BytesIO of UTF-8 SVG text per image)."""

    def __init__(self, data: list[io.BytesIO]):
        self.data = data


def svg_documents(documents: list[str]):
    """SVG texts as core ComfyUI's SVG (comfy_extras.nodes_images.SVG, what Save SVG takes) where ComfyUI
    runs, else as `SVGDocuments`."""
    core = comfy_module("comfy_extras.nodes_images", "SVG")
    return (SVGDocuments if core is None else core.SVG)([io.BytesIO(text.encode()) for text in documents])


def _kinds(shape_type: str, shape_kinds: str, background: str) -> tuple[int, ...]:
    """The shape kinds to place (shape_kinds when given, else shape_type), the text inputs bounded."""
    for name, text in (("shape_type", shape_type), ("shape_kinds", shape_kinds), ("background", background)):
        if not isinstance(text, str) or len(text) > MAX_TEXT:
            got = f"{len(text)} characters" if isinstance(text, str) else type(text).__name__
            raise ValueError(f"{name}: expected text of at most {MAX_TEXT} characters, got {got}")
    return engine.kind_codes(shape_kinds, "shape_kinds") if shape_kinds.strip() else engine.kind_codes(shape_type)


def _target(pixels: torch.Tensor, background: str, height: int, width: int):
    """What the search fits (pixels [B,H,W,C] resized to height x width), the background fill [B,3|4]
    (None: auto) and whether the fit is RGBA: a translucent background fits colours and transparency,
    premultiplied (an input without alpha is opaque)."""
    batch, channels = pixels.shape[0], pixels.shape[-1]
    fill, transparent = None, False
    if str(background).strip().lower() not in ("", "auto"):
        red, green, blue, opacity = parse_hex(background, "background")
        transparent = opacity < 1
        colour = (red * opacity, green * opacity, blue * opacity, opacity) if transparent else (red, green, blue)
        fill = torch.tensor(colour, device=pixels.device).expand(batch, len(colour))
    if transparent:
        coverage = pixels[..., 3:] if channels == 4 else torch.ones_like(pixels[..., :1])
        return _resize(torch.cat([pixels[..., :3] * coverage, coverage], -1), height, width), fill, True
    return _resize(pixels[..., :3], height, width), fill, False


def _fit(height: int, width: int, size: int) -> tuple[int, int]:
    """Height and width with the longer side `size`, the aspect ratio kept (each at least 1)."""
    scale = size / max(height, width)
    return max(1, round(height * scale)), max(1, round(width * scale))


def _resize(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """images [B,H,W,C] resized (bilinear, anti-aliased when shrinking); unchanged when the size is."""
    if images.shape[1:3] == (height, width):
        return images
    planar = images.permute(0, 3, 1, 2)
    resized = torch.nn.functional.interpolate(
        planar, size=(height, width), mode="bilinear", align_corners=False, antialias=True
    )
    return resized.permute(0, 2, 3, 1).clamp(0, 1).contiguous()


NODES = [PrimitiveMesh]
