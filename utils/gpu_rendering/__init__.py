"""The design card's 2D renderer: anti-aliased SDF primitives (segments, polylines, rounded boxes, discs,
ellipses, halos, triangles, text sprites) binned into tiles and composited on batches of frames (torch
path, CUDA kernel, numba loop), with labels, link and point styles, mask overlays and line plots on top.

Used by the nodes Bounding Box Renderer, Line Link Renderer, Mask Renderer and Series To Images (and
PrimitiveMesh for straight_alpha), and by the library's line plots (rasterkit.gpu_rendering,
utils/datasets.py).

Modules: constants (kinds, parameter columns, tile constants), primitives (the shapes), compositor
(binning, the torch path, the choice of backend), compositor_cuda / compositor_cpu (the CUDA kernel,
numba's loop), line_plots / line_plots_cpu (line plots), labels, link_styles, masks, series.
"""

from .box_regions import INSIDE_EDITS, edit_regions
from .box_styles import MARKERS, box_markers
from .compositor import PairPlan, composite, coverage, draw, draw_plan, straight_alpha
from .constants import BOX_FILL, BOX_STROKE, DISC, ELLIPSE, HALO, SEGMENT, SPRITE, TILE, TRIANGLE
from .labels import ANCHORS, DEFAULT_FONT, PADDING, font_chain, font_names, label_primitives, text_atlas
from .line_plots import fill_coverage, render_polylines, render_polylines_packed, series_points, value_range
from .link_layers import POINT_LABELS, LinkStyle, link_layers
from .link_styles import (
    LINE_STYLES,
    POINT_STYLES,
    WIDTH_BY_LENGTH,
    catmull_rom,
    markers,
    styled_polylines,
    trail_paths,
    width_by_length,
)
from .masks import LABEL_PLACES, Overlay, labelled, overlay, overlay_memory, tile_peaks, with_labels
from .primitives import (
    Primitives,
    concat,
    discs,
    ellipses,
    empty,
    halos,
    polylines,
    rounded_boxes,
    segments,
    sprites,
    tile_spans,
    triangles,
)
from .series import render_series, series_memory


def loop_modules() -> list:
    """The modules that hold this package's numba loops (utils/warmup.py compiles them ahead of use;
    importing them imports numba, which is slow)."""
    from . import box_regions_cpu, compositor_cpu, line_plots_cpu, masks_cpu

    return [compositor_cpu, line_plots_cpu, box_regions_cpu, masks_cpu]


__all__ = [
    "INSIDE_EDITS",
    "edit_regions",
    "ANCHORS",
    "LABEL_PLACES",
    "MARKERS",
    "POINT_LABELS",
    "LinkStyle",
    "Overlay",
    "PairPlan",
    "box_markers",
    "labelled",
    "link_layers",
    "series_memory",
    "BOX_FILL",
    "BOX_STROKE",
    "DEFAULT_FONT",
    "DISC",
    "ELLIPSE",
    "HALO",
    "LINE_STYLES",
    "PADDING",
    "POINT_STYLES",
    "SEGMENT",
    "SPRITE",
    "TILE",
    "TRIANGLE",
    "WIDTH_BY_LENGTH",
    "Primitives",
    "catmull_rom",
    "composite",
    "concat",
    "coverage",
    "discs",
    "draw",
    "draw_plan",
    "ellipses",
    "empty",
    "fill_coverage",
    "font_chain",
    "font_names",
    "halos",
    "label_primitives",
    "loop_modules",
    "markers",
    "overlay",
    "overlay_memory",
    "polylines",
    "render_polylines",
    "render_polylines_packed",
    "render_series",
    "rounded_boxes",
    "segments",
    "series_points",
    "sprites",
    "straight_alpha",
    "styled_polylines",
    "text_atlas",
    "tile_peaks",
    "tile_spans",
    "trail_paths",
    "triangles",
    "value_range",
    "width_by_length",
    "with_labels",
]
