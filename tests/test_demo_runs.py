"""The README's main job (`make demo`): every demo runs and writes its files. A node's outputs changing
under a demo once broke `make demo` unnoticed (PrimitiveMesh's fifth output)."""

import pytest

pytest.importorskip("av")  # requirements-dev.txt: the demo's MP4s

import demo  # noqa: E402


@pytest.mark.parametrize("name", list(demo.DEMOS))
def test_each_demo_writes_its_files(tmp_path, name):
    written = demo.DEMOS[name](demo.load_pack(), tmp_path)
    assert written and all(path.is_file() and path.stat().st_size > 0 for path in written), written
