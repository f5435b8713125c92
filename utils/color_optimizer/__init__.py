"""PrimitiveMesh's engine (nodes/primitives.py): an image approximated by shapes added one at a time, each
found by a batched search (fogleman/primitive's method), then drawn anti-aliased at any scale or as SVG.

    shapes.py       the kinds, their parameters and geometry, the constants every backend shares, checks
    search.py       the search's torch path and the choice of backend; search_cpu.py (numba's coverage sums),
                    search_cuda.py (the CUDA kernels)
    render.py       render, svg and shape_list (geometrize's JSON); render_cuda.py (the CUDA kernel)
    shapes_cuda.py  the shapes' geometry as CUDA device code, its #defines written from shapes.py

The `render` this package exports is the function (the module shadows it: reach the module with
importlib.import_module).
"""

from .render import render, render_memory, scale_params, shape_list, svg
from .search import approximate, approximate_passes, search_memory
from .shapes import (
    CIRCLE,
    COMBO,
    ELLIPSE,
    KINDS,
    LINE,
    MAX_KINDS_TEXT,
    N_PARAMS,
    PARAM_COUNTS,
    POLYGON,
    POLYLINE,
    QUADRATIC,
    RECTANGLE,
    ROTATED_ELLIPSE,
    ROTATED_RECTANGLE,
    TRIANGLE,
    Approximation,
    kind_codes,
    parse_passes,
)


def loop_modules() -> list:
    """The modules that hold this package's numba loops (utils/warmup.py compiles them ahead of use;
    importing them imports numba, which is slow)."""
    from . import search_cpu

    return [search_cpu]


__all__ = [
    "CIRCLE",
    "COMBO",
    "ELLIPSE",
    "KINDS",
    "LINE",
    "MAX_KINDS_TEXT",
    "N_PARAMS",
    "PARAM_COUNTS",
    "POLYGON",
    "POLYLINE",
    "QUADRATIC",
    "RECTANGLE",
    "ROTATED_ELLIPSE",
    "ROTATED_RECTANGLE",
    "TRIANGLE",
    "Approximation",
    "approximate",
    "approximate_passes",
    "kind_codes",
    "loop_modules",
    "parse_passes",
    "render",
    "render_memory",
    "scale_params",
    "search_memory",
    "shape_list",
    "svg",
]
