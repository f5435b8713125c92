"""ComfyUI services every node uses, imported lazily; no-ops when ComfyUI is absent (tests, demo)."""

from __future__ import annotations

import collections
import contextlib
import functools
import importlib
import math
import os
import sys
import time

import numpy as np
import torch

from ..utils import gpu_rendering as R
from ..utils.core.device import (
    backend_description,
    check_memory,
    cupy_usable,
    numba_usable,
    on_huge_pages,
    torch_device,
)
from ._validate import draw_memory

LAYER_ALPHA_MODES = ("straight", "premultiplied")
LAYER_ALPHA_TOOLTIP = (
    "layer output: straight alpha (ComfyUI's IMAGE-with-alpha convention, what Save Image "
    "stores) or premultiplied RGB (for compositing tools that expect it)"
)
LAYER_TOOLTIP = "RGBA: the overlay alone, straight alpha (or premultiplied, see layer_alpha)"
OVERLAY_OUTPUTS = ("image, alpha and layer", "image only")
OVERLAY_OUTPUTS_TOOLTIP = (
    "image only: the alpha and layer outputs are not made (1x1 blanks come out there), which "
    "saves 60% of the memory and much of the time on long videos on the CPU"
)


def overlay_outputs(image: torch.Tensor, alpha, layer) -> tuple:
    """image, alpha and layer on ComfyUI's intermediate device; 1x1 blanks (per frame) for an alpha
    and layer that were not made (outputs "image only")."""
    out = intermediate_device()
    if alpha is None:
        alpha = torch.zeros(image.shape[0], 1, 1)
    if layer is None:
        layer = torch.zeros(image.shape[0], 1, 1, 4)
    return image.to(out), alpha.to(out), layer.to(out)


def draw_overlay(images: torch.Tensor, prims, atlas, device, layer_alpha: str, outputs: str, job: str) -> tuple:
    """The overlay nodes' last step: draw()'s memory checked (a refusal names `job`, e.g. "boxes: 12 boxes
    on 4 frames of 512 x 512"), prims (and the text atlas, or None) drawn over images [B,H,W,C] on device
    with the node's progress bar, and overlay_outputs' image, alpha and layer."""
    image_only = outputs == OVERLAY_OUTPUTS[1]
    return overlay_outputs(
        *_checked_draw(images, prims, atlas, device, layer_alpha, image_only, job, Progress(len(images)))
    )


def _checked_draw(
    images, prims, atlas, device, layer_alpha: str, image_only: bool, job: str, on_progress, out=None
) -> tuple:
    """draw() of prims over images once its memory is checked: (image, alpha, layer) as draw returns them
    (into `out`, draw's, where given)."""
    # the torch path (no numba or CUDA loop) bins every tile pair of a chunk at once: its plan sizes that
    # memory, and draw reads nothing more
    torch_path = len(prims) > 0 and not (numba_usable(device) or cupy_usable(device))
    plan = R.draw_plan(prims, *images.shape[:3]) if torch_path else None
    check_memory(draw_memory(images, prims, atlas, image_only, plan), job, device)
    return R.draw(
        images,
        prims,
        atlas,
        device=device,
        on_progress=on_progress,
        layer_alpha=layer_alpha,
        image_only=image_only,
        plan=plan,
        out=out,
    )


def frame_windows(counts, limit: int) -> list[tuple[int, int]]:
    """Consecutive windows of frames [(start, stop), ...] covering len(counts) frames, each holding about
    `limit` of the frames' counts (a host sequence of work per frame; more only where one frame holds
    more)."""
    counts = np.asarray(counts, np.int64)
    cuts = np.flatnonzero(np.diff((np.cumsum(counts) - counts) // limit)) + 1  # where a frame starts a window
    bounds = [0, *cuts.tolist(), len(counts)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def draw_overlay_in_windows(
    images: torch.Tensor, windows, layers, device, layer_alpha: str, outputs: str, job: str
) -> tuple:
    """draw_overlay over consecutive windows of frames [(start, stop), ...] that cover the batch, the
    primitives of each built for it alone: layers(start, stop) -> (prims numbered from the window's first
    frame, atlas). A long video of a dense overlay never holds every frame's primitives at once, and
    interrupts are seen between windows."""
    batch = images.shape[0]
    if len(windows) == 1:
        return draw_overlay(images, *layers(0, batch), device, layer_alpha, outputs, job)
    image_only = outputs == OVERLAY_OUTPUTS[1]
    _, height, width, channels = images.shape
    output_bytes = batch * height * width * (channels + (0 if image_only else 5)) * images.element_size()
    check_memory(output_bytes, job, device)
    home = images.device
    drawn = (  # the outputs of every window, made once: each window's draw writes its frames' part
        on_huge_pages(torch.empty(images.shape, dtype=images.dtype, device=home)),
        None if image_only else on_huge_pages(torch.empty(batch, height, width, device=home)),
        None if image_only else on_huge_pages(torch.empty(batch, height, width, 4, device=home)),
    )
    progress = Progress(batch)
    for start, stop in windows:
        check_interrupt()
        prims, atlas = layers(start, stop)
        _checked_draw(
            images[start:stop],
            prims,
            atlas,
            device,
            layer_alpha,
            image_only,
            job,
            lambda done, _total, first=start: progress(first + done, batch),
            tuple(None if part is None else part[start:stop] for part in drawn),
        )
    return overlay_outputs(*drawn)


def comfy_module(name: str, *needed: str):
    """ComfyUI's module `name` when it imports and has every attribute in `needed`, else None. That the
    import works is not enough: a folder named like it on sys.path (a ComfyUI checkout cloned as comfy/
    beside the pack, whose root has a utils/ package) imports as a package without them. A name that
    failed to import is not searched for again (~0.6 ms each time outside ComfyUI), unless a module of
    that name has been put in sys.modules since."""
    module = sys.modules.get(name)
    if module is None:
        if name in _not_importable:
            return None
        try:
            module = importlib.import_module(name)
        except ImportError:
            if name not in sys.modules:  # not a None put there to block it for a while (tests)
                _not_importable.add(name)
            return None
    return module if all(hasattr(module, attribute) for attribute in needed) else None


_not_importable: set = set()


def _model_management():
    return comfy_module(
        "comfy.model_management", "get_torch_device", "intermediate_device", "throw_exception_if_processing_interrupted"
    )


def render_device() -> torch.device:
    """ComfyUI's torch device when it runs (respects --cpu and friends), else our own choice."""
    mm = _model_management()
    return mm.get_torch_device() if mm is not None else torch_device()


def log_backend() -> None:
    """Say once, at start, which rendering path is active and how to switch."""
    import logging

    logging.getLogger("rasterkit").info(backend_description(render_device()))


class _StandInFinder:
    """A meta path finder, last on sys.meta_path, that serves `module`'s public names as any module whose
    last name part is `leaf` (top-level or a package's submodule, the way callers import a compiled
    extension built beside their code) when no other finder has it."""

    def __init__(self, leaf: str, module):
        self.leaf, self.module = leaf, module

    def find_spec(self, fullname, path=None, target=None):
        if fullname.rpartition(".")[2] != self.leaf or os.environ.get(STANDINS[self.leaf]):
            return None
        import importlib.util

        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        import logging

        module.__dict__.update({name: getattr(self.module, name) for name in self.module.__all__})
        logging.getLogger("rasterkit").info(f"RasterKit: {module.__name__} served by {self.module.__name__}")


# the compiled extensions the pack stands in for, and the environment switch that turns each off
STANDINS = {
    "custom_rasterizer": "RASTERKIT_NO_CUSTOM_RASTERIZER",
    "nvdiffrast": "RASTERKIT_NO_NVDIFFRAST",
    "mesh_inpaint_processor": "RASTERKIT_NO_MESH_INPAINT",
}


def register_standins() -> None:
    """Serve the compiled 3D extensions texture pipelines import, from the pack's torch modules, where
    the real ones cannot be imported, so that those pipelines run without building them (each logged;
    STANDINS' variable set to 1 turns one off): `custom_rasterizer` (Hunyuan3D-2) from
    utils/custom_rasterizer.py, `nvdiffrast` and `nvdiffrast.torch` from utils/nvdiffrast.py, and
    `mesh_inpaint_processor` (Hunyuan3D-2.1, top-level or as a package's submodule) from
    utils/mesh_inpaint.py."""
    import logging
    import sys
    import types

    log = logging.getLogger("rasterkit")
    if (
        not os.environ.get(STANDINS["custom_rasterizer"])
        and comfy_module("custom_rasterizer", "rasterize", "interpolate") is None
    ):  # e.g. its unbuilt source folder
        from ..utils.mesh_rasterizer import custom_rasterizer

        sys.modules["custom_rasterizer"] = custom_rasterizer
        log.info(
            "RasterKit: custom_rasterizer (Hunyuan3D-2) served by RasterKit's rasterizer "
            "(RASTERKIT_NO_CUSTOM_RASTERIZER=1 turns this off)"
        )
    if not os.environ.get(STANDINS["nvdiffrast"]):
        try:  # a failed build fails its import in many ways, not only ImportError
            real = comfy_module("nvdiffrast.torch", "rasterize", "interpolate", "texture", "antialias")
        except Exception:  # noqa: BLE001
            real = None
        if real is None:
            from ..utils.mesh_rasterizer import nvdiffrast

            package = types.ModuleType("nvdiffrast")
            package.__path__ = []  # a package: `import nvdiffrast.torch` finds its submodule in sys.modules
            package.torch = nvdiffrast
            sys.modules["nvdiffrast"], sys.modules["nvdiffrast.torch"] = package, nvdiffrast
            log.info(
                "RasterKit: nvdiffrast.torch served by RasterKit's rasterizer (RASTERKIT_NO_NVDIFFRAST=1 "
                "turns this off)"
            )
    if not os.environ.get(STANDINS["mesh_inpaint_processor"]) and not any(
        isinstance(finder, _StandInFinder) for finder in sys.meta_path
    ):
        from ..utils.mesh_rasterizer import inpaint as mesh_inpaint

        sys.meta_path.append(_StandInFinder("mesh_inpaint_processor", mesh_inpaint))
        log.info(
            "RasterKit: mesh_inpaint_processor (Hunyuan3D-2.1) served by RasterKit where it is not built "
            "(RASTERKIT_NO_MESH_INPAINT=1 turns this off)"
        )


def intermediate_device() -> torch.device:
    """Where node outputs live between nodes: ComfyUI's intermediate device, else the CPU."""
    mm = _model_management()
    return mm.intermediate_device() if mm is not None else torch.device("cpu")


def check_interrupt() -> None:
    """Raise ComfyUI's interrupt exception when the user cancelled the prompt."""
    mm = _model_management()
    if mm is not None:
        mm.throw_exception_if_processing_interrupted()


# Preview PNGs written by this process, oldest first: past PREVIEWS_KEPT the oldest are deleted, so that
# the temp folder does not grow with every run (ComfyUI only empties it at start).
PREVIEWS_KEPT = 600  # a few nodes' worth of 120-frame build-up animations
_previews: collections.deque = collections.deque()


def _picture(frame: torch.Tensor):
    """One frame [H,W,C] (0..1) as an 8-bit RGB PIL image."""
    from PIL import Image

    return Image.fromarray((frame[..., :3].clamp(0, 1) * 255 + 0.5).to(torch.uint8).cpu().numpy())


def _save_temp(frame: torch.Tensor, max_side: int) -> dict:
    """Save one frame [H,W,C] (scaled to fit max_side) as a PNG in ComfyUI's temp folder."""
    import uuid

    import folder_paths

    height, width = frame.shape[:2]
    picture = _picture(frame)
    picture.thumbnail((max_side, max_side))
    name = f"rasterkit_{uuid.uuid4().hex[:12]}.png"
    path = os.path.join(folder_paths.get_temp_directory(), name)
    picture.save(path, compress_level=1)
    _previews.append(path)
    while len(_previews) > PREVIEWS_KEPT:
        with contextlib.suppress(OSError):
            os.remove(_previews.popleft())
    return {"filename": name, "subfolder": "", "type": "temp", "width": int(width), "height": int(height)}


def _comfyui_running() -> bool:
    return comfy_module("folder_paths", "get_temp_directory") is not None


def frame_preview(images: torch.Tensor, max_side: int = 1024) -> dict | None:
    """The first frame, scaled to fit max_side, saved to ComfyUI's temp folder for the frontend's
    editors: {"rasterkit_frame": [{filename, subfolder, type, width, height}]}; None without ComfyUI."""
    if not _comfyui_running() or images.shape[0] == 0:
        return None
    return {"rasterkit_frame": [_save_temp(images[0], max_side)]}


def animation_preview(frames: torch.Tensor, max_side: int = 512, limit: int = 120) -> dict | None:
    """Up to `limit` frames [N,H,W,C] saved to the temp folder for the frontend's player:
    {"rasterkit_animation": [{filename, ...}, ...]}; None without ComfyUI."""
    if not _comfyui_running() or frames.shape[0] == 0:
        return None
    return {"rasterkit_animation": [_save_temp(frame, max_side) for frame in frames[:limit]]}


class Progress:
    """Progress bar over `total` steps that also checks for interrupts at every update, and shows a
    preview image on the node while it runs (ComfyUI's live previews, as samplers send them)."""

    PREVIEW_INTERVAL = 0.5  # seconds between previews at least: a few a second are enough to watch
    PREVIEW_SIZE = 512  # longer side of a preview, at most

    def __init__(self, total: int):
        self.total = max(1, int(total))
        utils = comfy_module("comfy.utils", "ProgressBar")
        self._bar = utils.ProgressBar(self.total) if utils is not None else None
        self._last_preview = -math.inf

    def preview_due(self) -> bool:
        """Whether a preview given now would be shown: ComfyUI runs and the last one is PREVIEW_INTERVAL
        old. Callers read their image (a host transfer from a GPU) only when it is."""
        return self._bar is not None and time.monotonic() - self._last_preview >= self.PREVIEW_INTERVAL

    def __call__(self, done: int, total: int | None = None, preview: torch.Tensor | None = None) -> None:
        """Report `done` of `total` steps; preview: an image float [H,W,C] (0..1) to show on the node."""
        check_interrupt()
        if self._bar is None:
            return
        if preview is None:
            self._bar.update_absolute(done, total or self.total)
            return
        self._last_preview = time.monotonic()
        self._bar.update_absolute(done, total or self.total, ("JPEG", _picture(preview), self.PREVIEW_SIZE))


# The numba loop families (utils/warmup.FAMILIES) each node runs on the CPU
NODE_LOOPS = {
    "RasterKit_BoundingBoxRenderer": ("overlay compositor", "box regions"),
    "RasterKit_MaskRenderer": ("overlay compositor", "mask overlays"),
    "RasterKit_LineLinkRenderer": ("overlay compositor",),
    "RasterKit_TrackTrails": ("overlay compositor",),
    "RasterKit_SeriesToImages": ("overlay compositor", "line plots"),
    "RasterKit_PrimitiveMesh": ("primitive search",),
    "RasterKit_MeshRasterizer": ("mesh rasterizer",),
    "RasterKit_UVMaps": ("mesh rasterizer",),
    "RasterKit_BakeTexture": ("mesh rasterizer",),
}


def warm_up_cpu_loops(nodes) -> None:
    """At ComfyUI's start on the CPU: numba's loops compile in a background thread (utils/warmup), and
    each of `nodes` that runs before its own loop families are ready waits for those only."""
    if _prompt_server() is None or render_device().type != "cpu":
        return
    from ..utils import warmup

    if warmup.start() is None:  # numba's loops are off or not installed
        return
    for node in nodes:
        if node.NODE_ID in NODE_LOOPS:
            node.run = _waits_for_loops(node.run, node.DISPLAY_NAME, NODE_LOOPS[node.NODE_ID])


def _waits_for_loops(run, name: str, families) -> classmethod:
    from ..utils import warmup

    @functools.wraps(run)
    def waiting(cls, **inputs):
        wait_for_loops(name, families)
        with warmup.exclusive():
            return run(**inputs)

    return classmethod(waiting)


LOOPS_TYPICAL_SECONDS = 30  # a family's first compile on a small CPU: paces the progress bar while waiting


def wait_for_loops(name: str, families) -> None:
    """Wait for the background compilation of `families` where it is not over, saying so in the log
    and moving the node's progress bar meanwhile (it cannot know how long: it slows as it nears the end)."""
    import logging

    from ..utils import warmup

    if not warmup.pending(families):
        return
    log = logging.getLogger("rasterkit")
    log.info("RasterKit: %s waits for its CPU loops to compile (first run only)", name)
    progress = Progress(100)
    seconds = warmup.wait(families, lambda s: progress(int(99 * (1 - math.exp(-s / LOOPS_TYPICAL_SECONDS)))))
    progress(100)
    log.info("RasterKit: %s's CPU loops ready after %.0f s", name, seconds)


def _prompt_server():
    """ComfyUI's running server, or None (tests, the demo, a library user)."""
    server = comfy_module("server", "PromptServer")
    return getattr(server.PromptServer, "instance", None) if server is not None else None


def register_routes() -> None:
    """Server routes the frontend uses: GET /rasterkit/palettes (the palettes by name, so that the
    box editor previews the node's colours) and GET /rasterkit/mesh_extensions (the file types Load
    Mesh reads, for its upload button). No-op outside a running ComfyUI server."""
    try:
        from aiohttp import web
        from server import PromptServer
    except ImportError:
        return
    if getattr(PromptServer, "instance", None) is None:
        return
    from ..utils.inputs.colors import PALETTES
    from ..utils.inputs.mesh_files import MESH_EXTENSIONS

    @PromptServer.instance.routes.get("/rasterkit/palettes")
    async def palettes(request):
        return web.json_response(PALETTES)

    @PromptServer.instance.routes.get("/rasterkit/mesh_extensions")
    async def mesh_extensions(request):
        return web.json_response(list(MESH_EXTENSIONS))
