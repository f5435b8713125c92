"""numba's loops compiled ahead of first use (utils/warmup.py): by install.py, and at ComfyUI's start in a
background thread that nodes wait on for their own loop families only.

The compiling tests run in fresh processes with a cache folder of their own ($NUMBA_CACHE_DIR), the
pack imported as ComfyUI imports it (under its folder's path: numba's cache is kept per module name).
"""

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
import types
from pathlib import Path

import pytest
import torch

from rasterkit.nodes import _comfy
from rasterkit.utils import warmup

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available() or not warmup.numba_usable(torch.device("cpu")),
    reason="the loops are warmed up where they run: the CPU, numba installed",
)

# ComfyUI's import of the pack (nodes.load_custom_node), then `warmup` and `nodes` in the script's names
LOAD_LIKE_COMFYUI = """
import importlib, importlib.util, json, os, sys, time
root = sys.argv[1]
name = root.replace(".", "_x_")
spec = importlib.util.spec_from_file_location(name, os.path.join(root, "__init__.py"),
                                              submodule_search_locations=[root])
pack = importlib.util.module_from_spec(spec)
sys.modules[name] = pack
started = time.perf_counter()
spec.loader.exec_module(pack)
import_seconds = time.perf_counter() - started
warmup = importlib.import_module(name + ".utils.warmup")
nodes = pack.nodes
"""

# A running ComfyUI server, as far as the pack can tell (the pack's routes are added to nothing), and
# the log's messages in `messages` (and on stdout)
FAKE_SERVER = """
import logging, sys, types
logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(message)s")
messages = []
handler = logging.Handler()
handler.emit = lambda record: messages.append(record.getMessage())
logging.getLogger("rasterkit").addHandler(handler)
routes = types.SimpleNamespace(get=lambda path: (lambda handler: handler))
sys.modules["server"] = types.SimpleNamespace(PromptServer=types.SimpleNamespace(
    instance=types.SimpleNamespace(routes=routes)))
"""


def python(*script: str, cache: Path | None = None, **env) -> str:
    """stdout of the `script` parts run by a fresh Python with the repository root as argv[1] and numba's
    cache in `cache` (or where numba puts it); fails the test with its output if it fails."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("RASTERKIT_", "NUMBA_"))}
    environ.update({"NUMBA_CACHE_DIR": str(cache)} if cache else {}, **env)
    source = "\n".join(textwrap.dedent(part) for part in script)
    result = subprocess.run(
        [sys.executable, "-c", source, str(ROOT)],
        cwd=ROOT.parent,
        env=environ,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result.stdout


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    """A numba cache that install.py filled (every loop compiled from nothing), and what it printed."""
    cache = tmp_path_factory.mktemp("install") / "numba"
    printed = python(
        "import sys; sys.path.insert(0, sys.argv[1]); import install; install.compile_cpu_loops()", cache=cache
    )
    assert "RasterKit: compiling the CPU loops with numba" in printed
    assert re.search(r"RasterKit: CPU loops ready in \d+ s, numba's cache in " + re.escape(str(cache)), printed)
    return cache


def test_installed_loops_load_from_the_cache_in_comfyui(compiled):
    """After install.py, ComfyUI's process compiles nothing: each family's warm-up and each node's real
    calls load every loop from numba's cache (its dispatchers count cache hits and no misses), and the
    families each node waits for (NODE_LOOPS) hold the loops it runs."""
    count = """
    def counts():
        return {fn.py_func.__name__: (sum(fn.stats.cache_hits.values()), sum(fn.stats.cache_misses.values()))
                for fn in warmup.loops()}
    def loaded(run):
        before = counts()
        run()
        after = counts()
        return sorted(name for name in after if after[name] != before[name])
    """
    families = python(
        LOAD_LIKE_COMFYUI,
        count,
        """
    print(json.dumps({"uncached": warmup.uncached(),
                      "families": {family: loaded(warm) for family, warm in warmup.FAMILIES.items()},
                      "misses": sum(miss for _, miss in counts().values())}))
    """,
        cache=compiled,
    )
    families = json.loads(families.splitlines()[-1])
    assert families["uncached"] == [] and families["misses"] == 0
    assert all(families["families"].values())

    used = python(
        LOAD_LIKE_COMFYUI,
        count,
        """
    import torch
    images = torch.rand(2, 32, 48, 3)
    tracks = {"xy": torch.rand(2, 5, 2) * 30, "visible": torch.ones(2, 5, dtype=torch.bool)}
    spot = nodes.mesh.LoadMesh.run("spot.glb")[0]
    masks = torch.zeros(4, 32, 48)
    masks[:, 5:20, 8:30] = 1.0
    runs = [
        (nodes.boxes.BoundingBoxRenderer, dict(images=images, boxes="[[2, 2, 20, 20]]", labels="all")),
        (nodes.links.LineLinkRenderer, dict(images=images, tracks=tracks, tracks_json="")),
        (nodes.masks.MaskRenderer, dict(images=images, masks=masks, labels="id")),
        (nodes.series.SeriesToImages, dict(series="[1, 3, 2]", width=32, height=32, mode="aliased")),
        (nodes.series.SeriesToImages, dict(series="[1, 3, 2]", width=32, height=32)),
        (nodes.primitives.PrimitiveMesh, dict(image=images[:1], shapes=2, shape_type="combo", candidates=8,
                                              mutations=4, working_size=32, output_size=32)),
        (nodes.bake.UVMaps, dict(mesh=spot, texture_size=32)),
        (nodes.mesh.MeshRasterizer, dict(mesh=spot, width=32, height=32, antialias=True)),
    ]
    result = {}
    for node, inputs in runs:
        result.setdefault(node.NODE_ID, []).extend(loaded(lambda: node.run(**inputs)))
    print(json.dumps({"used": result, "misses": sum(miss for _, miss in counts().values())}))
    """,
        cache=compiled,
    )
    used = json.loads(used.splitlines()[-1])
    assert used["misses"] == 0
    assert all(
        used["used"][node]
        for node in (
            "RasterKit_BoundingBoxRenderer",
            "RasterKit_MaskRenderer",
            "RasterKit_SeriesToImages",
            "RasterKit_PrimitiveMesh",
            "RasterKit_UVMaps",
        )
    )
    for node, loops in used["used"].items():
        waited = {loop for family in _comfy.NODE_LOOPS.get(node, ()) for loop in families["families"][family]}
        assert set(loops) <= waited, node


def test_a_warm_start_loads_the_cache_silently(compiled):
    printed = python(
        FAKE_SERVER,
        LOAD_LIKE_COMFYUI,
        """
    thread = next(t for t in __import__("threading").enumerate() if t.name == "rasterkit-warmup")
    thread.join()
    assert not warmup.pending(list(warmup.FAMILIES))
    said = [message for message in messages if "CPU loops" in message]
    assert len(said) == 1 and said[0].startswith("RasterKit: CPU loops loaded from numba's cache in "), said
    """,
        cache=compiled,
    )
    assert "compiling" not in printed


def test_comfyui_start_returns_at_once_and_compiles_in_the_background(tmp_path):
    """With no cache, the pack's import returns while the loops compile in a daemon thread, which says
    so; the nodes that use loops wait for theirs."""
    python(
        FAKE_SERVER,
        LOAD_LIKE_COMFYUI,
        """
    import threading
    assert any(t.name == "rasterkit-warmup" and t.daemon for t in threading.enumerate())
    assert warmup.pending(list(warmup.FAMILIES)) == list(warmup.FAMILIES), "the import waited for a compile"
    assert nodes.boxes.BoundingBoxRenderer.run.__wrapped__ and not hasattr(nodes.mesh.LoadMesh.run, "__wrapped__")
    for _ in range(1200):  # the thread's first line, once it has imported numba and found no cache
        said = [message for message in messages if "CPU loops" in message]
        if said:
            break
        time.sleep(0.1)
    assert said == ["RasterKit: compiling CPU loops (first run only)"], messages
    print(f"import {import_seconds:.1f} s", flush=True)
    os._exit(0)  # not waiting for the compile
    """,
        cache=tmp_path / "numba",
    )


def test_disabled_numba_skips_the_warm_up(monkeypatch):
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    assert warmup.start() is None
    monkeypatch.setattr(_comfy, "_prompt_server", lambda: object())
    node = type(
        "Node",
        (),
        {"NODE_ID": "RasterKit_BoundingBoxRenderer", "DISPLAY_NAME": "Boxes", "run": classmethod(lambda cls: "drawn")},
    )
    run = node.run
    _comfy.warm_up_cpu_loops([node])
    assert node.run == run

    sys.path.insert(0, str(ROOT))
    try:
        import install
    finally:
        sys.path.remove(str(ROOT))
    monkeypatch.setattr(install.subprocess, "run", lambda *a, **k: pytest.fail("compiled with numba disabled"))
    install.compile_cpu_loops()


@pytest.fixture
def fresh_warmup(monkeypatch):
    """utils/warmup's background state, new, with families that record their order; `gate` holds the
    first one until opened."""
    state = types.SimpleNamespace(order=[], gate=threading.Event(), started=threading.Event(), layer="omp")

    def family(name):
        def warm():
            if name == "a":
                state.started.set()
                assert state.gate.wait(30)
            state.order.append(name)

        return warm

    monkeypatch.setattr(warmup, "FAMILIES", {name: family(name) for name in "abc"})
    monkeypatch.setattr(warmup, "_thread", None)
    monkeypatch.setattr(warmup, "_queue", [])
    monkeypatch.setattr(warmup, "_ready", {})
    monkeypatch.setattr(warmup, "_wanted", set())
    monkeypatch.setattr(warmup, "uncached", lambda: ["_composite"])
    monkeypatch.setattr(warmup, "cache_folder", lambda: "the cache")
    monkeypatch.setattr(warmup, "_threading_layer", lambda: state.layer)
    monkeypatch.setattr(warmup, "_running", threading.Lock())
    monkeypatch.setattr(warmup, "_exclusive", False)
    return state


def test_a_node_waits_for_its_own_family_which_compiles_next(fresh_warmup, caplog):
    caplog.set_level(logging.INFO, "rasterkit")
    thread = warmup.start()
    assert fresh_warmup.started.wait(30)
    assert warmup.pending(["a", "b", "c"]) == ["a", "b", "c"]
    ticks = []

    def on_wait(seconds):
        ticks.append(seconds)
        fresh_warmup.gate.set()  # the family under way ends; "c" comes before "b"

    warmup.wait(["c"], on_wait, interval=0.01)
    assert ticks and "c" in fresh_warmup.order
    thread.join(30)
    assert fresh_warmup.order == ["a", "c", "b"]
    assert warmup.wait(["b"]) == 0.0
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "RasterKit: compiling CPU loops (first run only)"
    assert re.fullmatch(
        r"RasterKit: compiling CPU loops \(first run only\): done in \d+ s, cached in the cache", messages[-1]
    )


@pytest.mark.parametrize("layer", ["omp", "workqueue"])
def test_a_node_runs_beside_the_warm_up_only_where_numba_allows_it(fresh_warmup, layer):
    """numba's workqueue layer aborts the process when parallel loops run in two threads at once: there a
    node's run waits for the family under way (and the next waits for the node)."""
    fresh_warmup.layer = layer
    thread = warmup.start()
    assert fresh_warmup.started.wait(30)
    entered = threading.Event()

    def node():
        with warmup.exclusive():
            entered.set()

    threading.Thread(target=node, daemon=True).start()
    assert entered.wait(0.5) == (layer != "workqueue")
    fresh_warmup.gate.set()
    assert entered.wait(30)
    thread.join(30)


def test_a_waiting_node_says_so_and_moves_its_progress_bar(monkeypatch, caplog):
    updates = []

    class ProgressBar:
        def __init__(self, total):
            pass

        def update_absolute(self, value, total=None):
            updates.append((value, total))

    monkeypatch.setattr(
        _comfy,
        "comfy_module",
        lambda name, *needed: types.SimpleNamespace(ProgressBar=ProgressBar) if name == "comfy.utils" else None,
    )
    monkeypatch.setattr(warmup, "pending", lambda families: list(families))

    def wait(families, on_wait):
        assert families == ("overlay compositor", "box regions")
        for seconds in (1, 10, 60):
            on_wait(seconds)
        return 61.0

    monkeypatch.setattr(warmup, "wait", wait)
    monkeypatch.setattr(_comfy, "_prompt_server", lambda: object())
    monkeypatch.setattr(warmup, "start", lambda: "a thread")
    node = type(
        "Node",
        (),
        {
            "NODE_ID": "RasterKit_BoundingBoxRenderer",
            "DISPLAY_NAME": "Bounding Box Renderer",
            "run": classmethod(lambda cls, images: f"drew {images}"),
        },
    )
    _comfy.warm_up_cpu_loops([node])
    caplog.set_level(logging.INFO, "rasterkit")
    assert node.run(images="x") == "drew x"
    values = [value for value, _ in updates]
    assert values == sorted(values) and 0 < values[0] < values[-2] < 100 and updates[-1] == (100, 100)
    assert [r.getMessage() for r in caplog.records] == [
        "RasterKit: Bounding Box Renderer waits for its CPU loops to compile (first run only)",
        "RasterKit: Bounding Box Renderer's CPU loops ready after 61 s",
    ]


def test_every_numba_module_is_warmed_up():
    """A new module with numba loops must join loop_modules() (and a family that calls its loops)."""
    modules = {Path(module.__file__).resolve() for module in warmup.loop_modules()}
    numba_users = {
        path.resolve()
        for path in (ROOT / "utils").rglob("*.py")  # core/numba.py: plumbing, no loop
        if re.search(r"^import numba|^from numba", path.read_text(), re.M)
    } - {ROOT / "utils/core/numba.py"}
    assert numba_users == modules


def test_a_read_only_install_caches_in_the_users_folder(tmp_path):
    """Where the pack's folder is not writable, numba caches in the user's cache folder ($XDG_CACHE_HOME on
    Linux) and a later process loads from there. (The tests run as root, whom no permission stops: the
    folder's refusal is simulated where numba asks.)"""
    read_only = """
    from numba.core import caching
    def refuse(self):
        raise PermissionError("read-only install")
    caching.InTreeCacheLocator.ensure_cache_path = refuse
    """
    script = """
    warmup.FAMILIES["mesh rasterizer"]()
    fn = next(fn for fn in warmup.loops() if fn.py_func.__name__ == "_depth_test")
    print(fn.stats.cache_path, sum(fn.stats.cache_hits.values()), sum(fn.stats.cache_misses.values()))
    """
    users = tmp_path / "user_cache"
    runs = [
        python(read_only, LOAD_LIKE_COMFYUI, script, XDG_CACHE_HOME=str(users)).splitlines()[-1].split()
        for _ in range(2)
    ]
    (path, hits, misses), (path_again, hits_again, misses_again) = runs
    assert path == path_again and path.startswith(str(users / "numba"))
    # one compile per signature (the faces' int32 and int64), each loaded from there the next time
    assert hits == misses_again == "0" and misses == hits_again and int(misses) >= 1


@pytest.mark.parametrize(
    "script, said",
    [
        ("import sys; sys.exit('boom')", "(boom)"),
        ("print('no report')", "(Expecting value"),
        ("import json; print(json.dumps({'uncached': ['a_loop'], 'cache': '.'}))", "(not compiled: a_loop)"),
    ],
    ids=["crash", "no report", "a loop numba failed"],
)
def test_a_failed_compile_never_fails_the_install(monkeypatch, capsys, script, said):
    """install.py's compile parts that crash, print no report or leave a loop uncached: the install goes on
    and says the loops compile at ComfyUI's start."""
    sys.path.insert(0, str(ROOT))
    try:
        import install
    finally:
        sys.path.remove(str(ROOT))
    monkeypatch.setattr(install, "_COMPILE", script)
    install.compile_cpu_loops()
    printed = capsys.readouterr().out
    assert f"compiling the CPU loops failed {said}" in printed and "at ComfyUI's start instead" in printed
