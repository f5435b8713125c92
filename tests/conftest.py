"""Shared fixtures. The pack is imported as the package `rasterkit` (ComfyUI imports it by its
folder name, which a clone may not have), and utils/ is importable on its own from the root."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from demo import load_pack  # noqa: E402

PACK = load_pack()


@pytest.fixture(scope="session")
def pack():
    return PACK


def pytest_collection_modifyitems(config, items):
    import torch

    skip_gpu = pytest.mark.skip(reason="no CUDA device: GPU tests run on a machine with one")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
