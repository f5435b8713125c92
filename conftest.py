"""The repository root is a ComfyUI node pack, so it has an __init__.py; collect it as a plain
folder, or pytest would import that __init__ outside its package (the folder of a clone may not
even be a Python name). The fixtures are in tests/conftest.py."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent


def pytest_collect_directory(path, parent):
    if path == ROOT:
        return pytest.Dir.from_parent(parent, path=path)
    return None
