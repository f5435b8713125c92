"""ComfyUI is recognised by the modules it really has, not by `import comfy...` working: a folder named
comfy/ on sys.path beside the pack (a ComfyUI checkout cloned as comfy/, whose root has a utils/
package; /x on sys.path as `cd /x && python -m pytest rasterkit/tests` puts it) must not turn the
pack's ComfyUI services on."""

import subprocess
import sys

import pytest
import torch

from rasterkit.nodes import _comfy
from rasterkit.nodes.boxes import BoundingBoxRenderer

LOOKALIKES = ("comfy", "folder_paths", "custom_rasterizer")


@pytest.fixture
def sibling_folders(tmp_path, monkeypatch):
    """Folders on sys.path named like ComfyUI's modules without being them: comfy/ with a utils/ package
    (ComfyUI's checkout root), folder_paths/ and Hunyuan3D-2's unbuilt custom_rasterizer/ source folder."""
    (tmp_path / "comfy" / "utils").mkdir(parents=True)
    (tmp_path / "comfy" / "utils" / "__init__.py").write_text("")
    (tmp_path / "folder_paths").mkdir()
    (tmp_path / "custom_rasterizer").mkdir()
    for name in [name for name in sys.modules if name.split(".")[0] in LOOKALIKES]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [name for name in sys.modules if name.split(".")[0] in LOOKALIKES]:
        del sys.modules[name]  # the lookalikes imported here; monkeypatch then restores the real ones


def test_a_sibling_comfy_folder_is_not_comfyui(sibling_folders):
    import comfy.utils  # the lookalike imports: the old check took that for ComfyUI

    assert not hasattr(comfy.utils, "ProgressBar")
    assert _comfy.render_device() == _comfy.torch_device()
    assert _comfy.intermediate_device() == torch.device("cpu")
    _comfy.check_interrupt()
    _comfy.Progress(3)(1)
    assert _comfy.frame_preview(torch.zeros(1, 4, 4, 3)) is None
    image, alpha, _ = BoundingBoxRenderer.run(torch.zeros(2, 24, 32, 3), boxes="[[4, 4, 20, 16]]", labels="none")
    assert image.shape == (2, 24, 32, 3) and float(alpha.amax()) > 0.9


def test_an_unbuilt_custom_rasterizer_folder_is_served_by_the_pack(sibling_folders, monkeypatch):
    from rasterkit.utils.mesh_rasterizer import custom_rasterizer

    monkeypatch.delenv("RASTERKIT_NO_CUSTOM_RASTERIZER", raising=False)
    _comfy.register_standins()
    assert sys.modules["custom_rasterizer"] is custom_rasterizer


def test_the_node_suite_runs_beside_a_comfy_folder(tmp_path):
    """The reported case end to end: a node test file run by pytest from the folder that holds both the
    pack and comfy/."""
    from conftest import ROOT

    (tmp_path / "comfy" / "utils").mkdir(parents=True)
    (tmp_path / "comfy" / "utils" / "__init__.py").write_text("")
    (tmp_path / "rasterkit").symlink_to(ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "rasterkit/tests/nodes/test_boxes.py"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
