"""ComfyUI services every node uses, imported lazily; no-ops when ComfyUI is absent (tests, demo)."""
from __future__ import annotations

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
