"""ComfyUI services every node uses, imported lazily; no-ops when ComfyUI is absent (tests, demo)."""
from __future__ import annotations

import os

import torch

from ..utils.device import torch_device


def _model_management():
    try:
        import comfy.model_management as mm
    except ImportError:
        return None
    return mm


def render_device() -> torch.device:
    """ComfyUI's torch device when it runs (respects --cpu and friends), else our own choice."""
    mm = _model_management()
    return mm.get_torch_device() if mm is not None else torch_device()


def intermediate_device() -> torch.device:
    """Where node outputs live between nodes: ComfyUI's intermediate device, else the CPU."""
    mm = _model_management()
    return mm.intermediate_device() if mm is not None else torch.device("cpu")


def check_interrupt() -> None:
    """Raise ComfyUI's interrupt exception when the user cancelled the prompt."""
    mm = _model_management()
    if mm is not None:
        mm.throw_exception_if_processing_interrupted()


def frame_preview(images: torch.Tensor, max_side: int = 1024) -> dict | None:
    """The first frame, scaled to fit max_side, saved to ComfyUI's temp folder for the frontend's
    editors: {"rasterkit_frame": [{filename, subfolder, type, width, height}]}; None without ComfyUI."""
    try:
        import folder_paths
    except ImportError:
        return None
    import uuid

    from PIL import Image

    height, width = images.shape[1:3]
    frame = (images[0, ..., :3].clamp(0, 1) * 255 + 0.5).to(torch.uint8).cpu().numpy()
    picture = Image.fromarray(frame)
    picture.thumbnail((max_side, max_side))
    name = f"rasterkit_frame_{uuid.uuid4().hex[:12]}.png"
    picture.save(os.path.join(folder_paths.get_temp_directory(), name), compress_level=1)
    return {"rasterkit_frame": [{"filename": name, "subfolder": "", "type": "temp", "width": int(width),
                                 "height": int(height)}]}


class Progress:
    """Progress bar over `total` steps that also checks for interrupts at every update."""

    def __init__(self, total: int):
        self.total = max(1, int(total))
        try:
            import comfy.utils
            self._bar = comfy.utils.ProgressBar(self.total)
        except ImportError:
            self._bar = None

    def __call__(self, done: int, total: int | None = None) -> None:
        check_interrupt()
        if self._bar is not None:
            self._bar.update_absolute(done, total or self.total)


def register_routes() -> None:
    """Server routes the frontend uses: GET /rasterkit/palettes (the palettes by name, so that the
    box editor previews the node's colours). No-op outside a running ComfyUI server."""
    try:
        from aiohttp import web
        from server import PromptServer
    except ImportError:
        return
    if getattr(PromptServer, "instance", None) is None:
        return
    from ..utils.colors import PALETTES

    @PromptServer.instance.routes.get("/rasterkit/palettes")
    async def palettes(request):
        return web.json_response(PALETTES)
