"""Series text (JSON or CSV) as one padded batch of values for the line-plot engine
(gpu_rendering.render_series), and the series node's colour list."""

from __future__ import annotations

import csv
import io
import math

from ..core.batching import Ragged, pack
from .colors import PALETTES, palette, palette_from_hex, parse_hex
from .text import check_size, load_json

# More values than this per plot cost memory (anti-aliased lines: ~40 KB per value) without a visible
# difference: a plot is at most 8192 px wide. Audio windows longer than this are reduced to their envelope.
MAX_SERIES_VALUES = 65_536
# Finite values are clipped to +-this: float32 holds it, and the range between two of them stays finite
# (1e308 would become infinite in float32: a blank plot; 1e39 a gap).
VALUE_LIMIT = 1e37


def _number(value, where: str, input_name: str) -> float:
    """A float clipped to +-VALUE_LIMIT (NaN kept: a gap); ValueError naming the input otherwise."""
    try:
        number = float(value)
    except OverflowError:  # an integer past float range: finite, so clipped like the others
        return VALUE_LIMIT if value > 0 else -VALUE_LIMIT
    except (TypeError, ValueError):
        raise ValueError(f"{input_name}: {where} is not a number: {value!r}") from None
    if math.isinf(number):
        raise ValueError(f"{input_name}: {where} is infinite; use null or NaN for a gap")
    return min(max(number, -VALUE_LIMIT), VALUE_LIMIT)


def from_text(text: str, orientation: str = "rows", input_name: str = "series") -> Ragged:
    """JSON (a list of numbers: one series; a list of lists: one series each; an object of named lists:
    one series each, in the object's order; null = NaN = gap) or CSV (numbers; one series per row, or
    per column with orientation "columns"; a header row of names is skipped; empty cells are gaps).
    Returns Ragged values [B,T] float32."""
    text = (text or "").strip()
    if not text:
        raise ValueError(f"{input_name}: empty; give JSON such as [[1, 2, 3], [3, 1, 2]] or CSV rows, or connect audio")
    if text[0] in "[{":
        data = load_json(text, input_name)
        if isinstance(data, dict):  # text starting with { or [ is an object or a list
            names, data = [repr(name) for name in data], list(data.values())
        else:
            if all(not isinstance(item, list) for item in data):
                data = [data]
            names = list(range(len(data)))
        rows = []
        for name, item in zip(names, data, strict=False):
            if not isinstance(item, list):
                raise ValueError(f"{input_name}: series {name} is not a list: {item!r}")
            rows.append(
                [
                    math.nan if v is None else _number(v, f"series {name} value {j}", input_name)
                    for j, v in enumerate(item)
                ]
            )
    else:
        check_size(text, input_name)
        table = [row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
        if table and not _is_numeric_row(table[0]):
            table = table[1:]  # header
        cells = [
            [
                math.nan if not cell.strip() else _number(cell, f"row {r + 1}, column {c + 1}", input_name)
                for c, cell in enumerate(row)
            ]
            for r, row in enumerate(table)
        ]
        if orientation == "columns":
            width = max((len(row) for row in cells), default=0)
            cells = [[row[c] for row in cells if c < len(row)] for c in range(width)]
        rows = cells
    if not rows:
        raise ValueError(f"{input_name}: no series found")
    longest = max(range(len(rows)), key=lambda i: len(rows[i]))
    if len(rows[longest]) > MAX_SERIES_VALUES:
        raise ValueError(
            f"{input_name}: series {longest} has {len(rows[longest]):,} values; at most "
            f"{MAX_SERIES_VALUES:,} per series are plotted (resample it first, or connect it as audio)"
        )
    return pack([row or [math.nan] for row in rows])  # an empty series is one gap: a blank image


def _is_numeric_row(row) -> bool:
    try:
        [float(cell) for cell in row if cell.strip()]
    except ValueError:
        return False
    return True


def series_colors(text: str, count: int, input_name: str = "colors") -> list[tuple[float, float, float, float]]:
    """`count` RGBA colours from a palette name or hex colours separated by commas or spaces, cycled."""
    text = (text or "").strip()
    choices = palette(text, input_name) if text in PALETTES else palette_from_hex(text, input_name)
    return [choices[i % len(choices)] for i in range(count)]


# Colour maps for gradients and spectrograms: matplotlib's perceptually uniform maps, sampled evenly.
COLORMAPS = {
    "magma": ["#000004", "#3B0F70", "#8C2981", "#DE4968", "#FE9F6D", "#FCFDBF"],
    "inferno": ["#000004", "#420A68", "#932667", "#DD513A", "#FCA50A", "#FCFFA4"],
    "viridis": ["#440154", "#3B528B", "#21918C", "#5EC962", "#FDE725"],
    "plasma": ["#0D0887", "#6A00A8", "#B12A90", "#E16462", "#FCA636", "#F0F921"],
    "gray": ["#000000", "#FFFFFF"],
}


def gradient_stops(text: str, input_name: str = "gradient") -> list[tuple[float, float, float, float]]:
    """RGBA stops of a colour map name (COLORMAPS) or of hex colours separated by commas or spaces; []
    for empty text."""
    text = (text or "").strip()
    if not text:
        return []
    if text in COLORMAPS:
        return [parse_hex(c, input_name) for c in COLORMAPS[text]]
    try:
        return palette_from_hex(text, input_name)
    except ValueError as error:
        raise ValueError(f"{error}; or a colour map: {', '.join(COLORMAPS)}") from None
