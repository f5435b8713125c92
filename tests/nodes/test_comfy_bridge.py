"""Progress bars and interrupts reach ComfyUI; without ComfyUI they are no-ops."""

import sys
import types

import pytest
import torch

from rasterkit.nodes import _comfy
from rasterkit.nodes.boxes import BoundingBoxRenderer


class Interrupted(Exception):
    pass


@pytest.fixture
def fake_comfy(monkeypatch):
    state = types.SimpleNamespace(updates=[], interrupt_after=None, checks=0)

    class ProgressBar:
        def __init__(self, total):
            self.total = total

        def update_absolute(self, value, total=None):
            state.updates.append((value, total))

    def throw_exception_if_processing_interrupted():
        state.checks += 1
        if state.interrupt_after is not None and state.checks > state.interrupt_after:
            raise Interrupted()

    management = types.SimpleNamespace(
        throw_exception_if_processing_interrupted=throw_exception_if_processing_interrupted,
        get_torch_device=lambda: torch.device("cpu"),
        intermediate_device=lambda: torch.device("cpu"),
    )
    comfy = types.ModuleType("comfy")
    comfy.utils = types.SimpleNamespace(ProgressBar=ProgressBar)
    comfy.model_management = management
    monkeypatch.setitem(sys.modules, "comfy", comfy)
    monkeypatch.setitem(sys.modules, "comfy.utils", comfy.utils)
    monkeypatch.setitem(sys.modules, "comfy.model_management", management)
    return state


def test_without_comfyui_everything_is_a_no_op():
    assert _comfy.intermediate_device() == torch.device("cpu")
    _comfy.check_interrupt()
    _comfy.Progress(3)(1)


def test_long_batches_report_progress(fake_comfy, monkeypatch):
    from rasterkit.utils.core import device

    monkeypatch.setattr(device, "free_memory_bytes", lambda _device: 64 << 30)  # chunk size set by the limit only
    frames = torch.zeros(34, 1024, 1024, 3)  # chunks hold ~32 megapixels of work (pixels and the marks' tiles)
    BoundingBoxRenderer.run(frames, boxes="[[10, 10, 100, 100]]", labels="none")
    done = [value for value, _ in fake_comfy.updates]
    assert len(done) == 2 and 0 < done[0] < 34 and fake_comfy.updates[-1] == (34, 34), fake_comfy.updates


def test_interrupt_stops_the_node(fake_comfy):
    fake_comfy.interrupt_after = 0
    with pytest.raises(Interrupted):
        BoundingBoxRenderer.run(torch.zeros(34, 1024, 1024, 3), boxes="[[10, 10, 100, 100]]", labels="none")
    assert fake_comfy.checks == 1  # stopped after the first chunk, not at the end of the batch


@pytest.fixture
def fake_folder_paths(monkeypatch, tmp_path):
    module = types.ModuleType("folder_paths")
    module.get_temp_directory = lambda: str(tmp_path)
    monkeypatch.setitem(sys.modules, "folder_paths", module)
    return tmp_path


def test_previews_save_frames_for_the_editors_and_the_player(fake_folder_paths):
    from PIL import Image

    from rasterkit.nodes.links import LineLinkRenderer
    from rasterkit.nodes.primitives import PrimitiveMesh

    frames = torch.rand(3, 40, 60, 3)
    ui = LineLinkRenderer.preview({"images": frames}, ())
    (entry,) = ui["rasterkit_frame"]
    assert (entry["width"], entry["height"], entry["type"]) == (60, 40, "temp")
    assert Image.open(fake_folder_paths / entry["filename"]).size == (60, 40)

    buildup = torch.rand(7, 700, 350, 3)
    ui = PrimitiveMesh.preview({}, (torch.rand(1, 700, 350, 3), buildup, ""))
    assert len(ui["rasterkit_animation"]) == 7
    assert Image.open(fake_folder_paths / ui["rasterkit_animation"][0]["filename"]).size == (256, 512)


def test_previews_are_none_without_comfyui():
    from rasterkit.nodes.primitives import PrimitiveMesh

    assert _comfy.frame_preview(torch.rand(1, 4, 4, 3)) is None
    assert PrimitiveMesh.preview({}, (None, torch.rand(2, 4, 4, 3), "")) is None


def test_old_previews_are_deleted_so_the_temp_folder_stays_bounded(fake_folder_paths, monkeypatch):
    monkeypatch.setattr(_comfy, "PREVIEWS_KEPT", 5)
    monkeypatch.setattr(_comfy, "_previews", __import__("collections").deque())
    for _ in range(3):
        _comfy.animation_preview(torch.rand(4, 8, 8, 3))
    kept = sorted(fake_folder_paths.glob("rasterkit_*.png"))
    assert len(kept) == 5 and set(map(str, kept)) == set(_comfy._previews)
