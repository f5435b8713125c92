"""numba's CPU loops compiled ahead of first use, so that no node sits silent while they compile (the
first time only: tens of seconds per family on a small CPU).

Each family's warm-up runs the engine that owns its loops once on tiny CPU inputs, through the calls
the nodes make, so numba compiles exactly the signatures the nodes use. numba keeps what it compiled
on disk (cache=True): in __pycache__ beside the sources, or where the pack's folder is not writable
in the user's cache folder (numba's own fallback: ~/.cache/numba on Linux); $NUMBA_CACHE_DIR, when
set, replaces both. A later process loads it from there in well under a second.

`compile_all` runs every family in the calling thread (install.py runs it in a subprocess); `start`
runs them in a daemon thread (ComfyUI's start), and `wait` lets a node wait for its families only.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import torch

from . import color_optimizer, gpu_rendering, inputs, mesh_rasterizer
from .core.device import numba_usable

log = logging.getLogger("rasterkit")


def overlay_compositor() -> None:
    """gpu_rendering's tile compositor (compositor_cpu.render): boxes, links, labels, antialiased plots."""
    disc = gpu_rendering.discs(0, torch.tensor([[4.0, 4.0]]), 3.0, (1.0, 0.5, 0.0, 1.0))
    gpu_rendering.draw(torch.zeros(1, 8, 8, 3), disc, device="cpu")


def line_plots() -> None:
    """The aliased line plots' loops (line_plots_cpu.series_points and polylines), into float and 8-bit
    images (the two dtypes they draw into), and as bits (polylines_packed: the dataset CLI's PNGs)."""
    values = torch.tensor([[0.0, 1.0, 0.5]])
    for dtype in (torch.float32, torch.uint8):
        gpu_rendering.render_polylines(values, 8, 8, dtype=dtype, device="cpu")
    gpu_rendering.render_polylines_packed(values, 8, 8, device="cpu")


def box_regions() -> None:
    """The Bounding Box Renderer's edits inside and outside its boxes (gpu_rendering.box_regions_cpu):
    blur, pixelate and dim."""
    images, frame, bounds = torch.zeros(1, 8, 8, 3), torch.zeros(1, dtype=torch.long), torch.tensor([[1.0, 1, 6, 6]])
    for inside in ("blur", "pixelate"):
        gpu_rendering.edit_regions(images, frame, bounds, inside, 3, 0.5)


def mask_overlays() -> None:
    """The Mask Renderer's passes over its masks (gpu_rendering.masks_cpu), as the node calls them: tile
    peaks, the memory estimate's counts, listed tiles, outline pieces and their runs joined, fills and
    outlines, a halo's blur, the objects' bounds (read by labels)."""
    masks = torch.zeros(1, 9, 9)
    masks[0, 2:6, 3:7] = 1.0
    objects = inputs.mask_objects(masks, None, 1, 9, 9)
    peak = gpu_rendering.tile_peaks(objects.masks)
    gpu_rendering.overlay_memory(objects, 9, 9, 0.5, True, 0.0, peak)
    _ = gpu_rendering.overlay(objects, 9, 9, torch.ones(1, 3), halo_width=2.0, peak=peak).bounds  # found on first use


def mesh_rasterizer_loops() -> None:
    """The mesh rasterizer's depth test and resolve (mesh_rasterizer.raster_cpu): Mesh Rasterizer, UV Maps, Bake."""
    # the second triangle has a corner behind the eye: with clip_near the near plane's loop too (its
    # pieces make the faces int64), without it (custom_rasterizer's call) the loops on the faces as given
    corners = torch.tensor([[[-0.5, -0.5, 0.0, 1.0], [0.5, -0.5, 0.0, 1.0], [0.0, 0.5, 0.0, 1.0], [0, 0, 0, -1.0]]])
    for dtype in (torch.long, torch.int32):  # the loops that read faces compile once for each
        for clip_near in (True, False):
            faces = torch.tensor([[0, 1, 2], [0, 1, 3]], dtype=dtype)
            mesh_rasterizer.rasterize_views(corners, faces, 8, 8, clip_near=clip_near)


def primitive_search() -> None:
    """PrimitiveMesh's coverage sums (color_optimizer/search_cpu.py), both shape families that use them."""
    target = torch.linspace(0, 1, 8 * 8 * 3).reshape(1, 8, 8, 3)
    kinds = color_optimizer.kind_codes("triangle, ellipse")
    color_optimizer.approximate(target, 1, kinds, candidates=4, mutations=2, generator=torch.Generator().manual_seed(0))


# in the order a background warm-up compiles them: the families most nodes use first
FAMILIES = {
    "overlay compositor": overlay_compositor,
    "line plots": line_plots,
    "primitive search": primitive_search,
    "mesh rasterizer": mesh_rasterizer_loops,
    "box regions": box_regions,
    "mask overlays": mask_overlays,
}


def loop_modules() -> list:
    """The modules that hold numba loops (importing them imports numba: slow, hence here)."""
    return [*gpu_rendering.loop_modules(), *color_optimizer.loop_modules(), mesh_rasterizer.cpu_loops()]


def loops() -> list:
    """Every loop numba compiles on its own (the inlined helpers compile into them): the dispatchers of
    loop_modules()."""
    import numba.core.registry

    return [
        fn
        for module in loop_modules()
        for fn in vars(module).values()
        if isinstance(fn, numba.core.registry.CPUDispatcher) and fn.targetoptions.get("inline") != "always"
    ]


def uncached() -> list[str]:
    """Names of the loops that numba has not cached yet for these sources (numba's index of a loop's
    cache is missing, of another numba version, or of older sources): those will compile."""
    missing = []
    for fn in loops():
        try:
            cached = bool(fn._cache._cache_file._load_index())  # numba's own freshness checks
        except Exception:  # numba's internals moved: say it compiles rather than stay silent
            cached = False
        if not cached:
            missing.append(fn.py_func.__name__)
    return missing


def cache_folder() -> str:
    """Where numba caches the loops (beside the sources, or the user-wide folder where those are read-only)."""
    return loops()[0].stats.cache_path


def compile_all(families=None, report=None) -> dict[str, float]:
    """Compile (or load from numba's cache) `families` of FAMILIES (default: all) here and now; seconds
    per family. report(family, seconds) after each."""
    seconds = {}
    for family in FAMILIES if families is None else families:
        start = time.perf_counter()
        FAMILIES[family]()
        seconds[family] = time.perf_counter() - start
        if report is not None:
            report(family, seconds[family])
    return seconds


# The background warm-up: families not started yet (in order), one Event per family (set when its
# loops are ready, or failed), and those a waiting node asked for (compiled next). Where numba's
# threading layer is "workqueue" (no TBB or OpenMP on the machine), parallel loops running in two threads
# at once abort the process: a family's warm-up and a node's run then hold `_running` (`_exclusive`).
_lock = threading.Lock()
_queue: list[str] = []
_ready: dict[str, threading.Event] = {}
_wanted: set[str] = set()
_thread: threading.Thread | None = None
_running = threading.Lock()
_exclusive = False


def start() -> threading.Thread | None:
    """Compile every family in a daemon thread, once per process; None where numba's loops are off
    (RASTERKIT_DISABLE_NUMBA, no numba). Logs "compiling ... (first run only)" and the time it took
    when some loop had no cache; a warm start only loads the cache, silently."""
    global _thread
    if not numba_usable(torch.device("cpu")):
        return None
    with _lock:
        if _thread is None:
            _queue[:] = list(FAMILIES)
            _ready.update({family: threading.Event() for family in FAMILIES})
            _thread = threading.Thread(target=_run, name="rasterkit-warmup", daemon=True)
            _thread.start()
    return _thread


def _next() -> str | None:
    with _lock:
        if not _queue:
            return None
        family = next((f for f in _queue if f in _wanted), _queue[0])
        _queue.remove(family)
        return family


def _threading_layer() -> str:
    """The threading layer numba's parallel loops run on here (started now if they have not run yet)."""
    import numba
    from numba.np.ufunc import parallel

    threads = torch.get_num_threads()
    parallel._launch_threads()
    torch.set_num_threads(threads)  # OpenMP's threads starting set torch's count too (core.numba.torch_threads)
    return numba.threading_layer()


def _run() -> None:
    global _exclusive
    start_time = time.perf_counter()
    try:
        missing = uncached()
        _exclusive = _threading_layer() == "workqueue"
    except Exception as error:  # numba does not import after all: the nodes take the torch path
        log.warning("RasterKit: numba's CPU loops unavailable (%s: %s)", type(error).__name__, error)
        missing = []
    if missing:
        log.info("RasterKit: compiling CPU loops (first run only)")
    while (family := _next()) is not None:
        try:
            with _running:
                FAMILIES[family]()
        except Exception as error:  # a node using this family reports its own error or falls back
            log.warning("RasterKit: warming up the %s failed (%s: %s)", family, type(error).__name__, error)
        finally:
            _ready[family].set()
    seconds = time.perf_counter() - start_time
    if missing:
        log.info(
            "RasterKit: compiling CPU loops (first run only): done in %.0f s, cached in %s", seconds, cache_folder()
        )
    else:
        log.debug("RasterKit: CPU loops loaded from numba's cache in %.1f s", seconds)


def pending(families) -> list[str]:
    """Those of `families` that the background warm-up has yet to finish (none when it is not running)."""
    return [f for f in families if f in _ready and not _ready[f].is_set()]


def wait(families, on_wait=None, interval: float = 0.5) -> float:
    """Block until the background warm-up has finished `families` (those are compiled next), at once
    when it does not run or has finished them; seconds waited. on_wait(seconds so far) every `interval`
    seconds while waiting (a progress bar, interrupt checks)."""
    waiting = pending(families)
    if not waiting:
        return 0.0
    with _lock:
        _wanted.update(waiting)
    start_time = time.perf_counter()
    for family in waiting:
        while not _ready[family].wait(interval):
            if on_wait is not None:
                on_wait(time.perf_counter() - start_time)
    return time.perf_counter() - start_time


@contextlib.contextmanager
def exclusive():
    """Around a node's run: where numba's loops may not run in two threads at once (`_exclusive`), keeps
    the background warm-up from starting another family meanwhile (and waits for the one under way)."""
    if _exclusive and _thread is not None and _thread.is_alive():
        with _running:
            yield
    else:
        yield
