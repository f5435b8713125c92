"""Every parser of the nodes' inputs: JSON/CSV text within limits, colours and palettes, boxes of every
source (JSON, BBOX, SEGS, MASK, BOUNDING_BOX), tracks of every format, series text, audio windows and
spectra, per-object masks and SEGS, mesh files' declared sizes. Errors are ValueErrors that name the
input, the value and what is accepted. Used by every node, and by the engines for the parsed types."""

from .audio import from_audio, from_audio_spectrum, spectrum_bands
from .boxes import BoxTable, box_colors, box_label_texts, box_table, label_priority
from .colors import PALETTES, palette, palette_from_hex, parse_hex, stable_index
from .masks import MaskObjects, mask_objects, object_colors, object_label_texts
from .series import from_text, series_colors
from .text import check_size, load_json, short, text_limit
from .tracks import Labels, to_json, track_points

__all__ = [
    "PALETTES",
    "BoxTable",
    "Labels",
    "MaskObjects",
    "box_colors",
    "box_label_texts",
    "box_table",
    "check_size",
    "from_audio",
    "from_audio_spectrum",
    "from_text",
    "label_priority",
    "load_json",
    "mask_objects",
    "object_colors",
    "object_label_texts",
    "palette",
    "palette_from_hex",
    "parse_hex",
    "series_colors",
    "short",
    "spectrum_bands",
    "stable_index",
    "text_limit",
    "to_json",
    "track_points",
]
